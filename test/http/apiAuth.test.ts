/**
 * Who is calling /v1, on its own: principals made once per key owner the authenticator keeps
 * (expiry still checked on every request, a changed key never served from the old principal),
 * and the route step that takes the principal the parse hook found without a promise, refusing
 * when there is none. A fake clock and an in-memory key store; no server.
 */
import { describe, expect, test } from "bun:test";
import { Elysia } from "elysia";
import { KeyAuthenticator } from "../../src/core/accounts";
import { hashApiKey } from "../../src/core/apiKeys";
import type { AccountStore, KeyOwner } from "../../src/core/store";
import { apiAuthAfterBody, authenticateApiRequest, bearerSecret, type Principal } from "../../src/http/auth";
import { ApiError } from "../../src/http/errors";
import { metaOf } from "../../src/http/requestMeta";
import { fakeClock } from "../support/fakeClock";

const SECRET = "sk-atl-abcdefghijklmnopqrstuvwxyz012345";

function setup(expiresInMs: number | null = null) {
  const clock = fakeClock();
  let owner: KeyOwner = {
    key_id: 7, key_prefix: "sk-atl-abcdefgh", key_revoked_at: null, user_id: 3, email: "a@example.com", role: "user", disabled: 0,
    key_name: "ci", key_created_at: clock.now(), key_expires_at: expiresInMs === null ? null : clock.now() + expiresInMs, key_credit_cap: null,
    key_allowed_models: JSON.stringify(["mock-chat"]),
  };
  let revision = 0;
  let reads = 0;
  const store: AccountStore = {
    users: { create: () => Promise.reject(new Error("not used")) },
    keys: {
      create: () => Promise.reject(new Error("not used")),
      ownerByHash: async (hash) => (reads++, hash === hashApiKey(SECRET) ? { ...owner } : null),
      localRevision: () => revision,
      externalRevision: async () => 0,
      touch: async () => true,
    },
  };
  const keys = new KeyAuthenticator(store, clock.now);
  const request = () => new Request("http://x/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${SECRET}` } });
  /** The principal of a new request (awaited when the authenticator had to read). */
  const authenticate = async (): Promise<Principal> => await authenticateApiRequest(request(), { keys });
  const refusal = async (): Promise<ApiError> => {
    const e = await authenticate().then(() => undefined, (err: unknown) => err);
    expect(e).toBeInstanceOf(ApiError);
    return e as ApiError;
  };
  return {
    clock, authenticate, refusal,
    reads: () => reads,
    /** What this process's own change (a revocation, say) does: the store's local revision moves. */
    change(next: Partial<KeyOwner>) {
      owner = { ...owner, ...next };
      revision++;
    },
  };
}

describe("principals of cached key owners", () => {
  test("one principal per owner record: later requests share it, with the key's limits parsed once", async () => {
    const { authenticate, reads } = setup();
    const first = await authenticate();
    const second = await authenticate();
    expect(second).toBe(first);
    expect(first).toMatchObject({ userId: 3, keyId: 7, keyPrefix: "sk-atl-abcdefgh", via: "key", key: { limits: { allowedModels: ["mock-chat"] } } });
    expect(reads()).toBe(1);
  });

  test("an expiry that passes refuses the very next request, though its principal was made before", async () => {
    const { authenticate, refusal, clock } = setup(1000);
    await authenticate();
    clock.advance(999);
    await authenticate();
    clock.advance(2);
    expect((await refusal()).errorCode).toBe("api_key_expired");
  });

  test("a revoked key or a disabled account is refused at once: a new owner record, never the old principal", async () => {
    const revoked = setup();
    await revoked.authenticate();
    revoked.change({ key_revoked_at: revoked.clock.now() });
    expect((await revoked.refusal()).errorCode).toBe("invalid_api_key");

    const disabled = setup();
    await disabled.authenticate();
    disabled.change({ disabled: 1 });
    expect((await disabled.refusal()).errorCode).toBe("account_disabled");
  });

  test("a changed allow-list gives a new principal with the new limits", async () => {
    const { authenticate, change } = setup();
    const before = await authenticate();
    change({ key_allowed_models: null });
    const after = await authenticate();
    expect(after).not.toBe(before);
    expect(after.key!.limits.allowedModels).toBeNull();
  });
});

describe("apiAuthAfterBody", () => {
  const principal: Principal = { userId: 3, keyId: 7, email: "a@example.com", role: "user", via: "key" };
  // A parse hook stands in for acceptApiBody: it finds the caller, or (x-skip) finds no one.
  const app = new Elysia()
    .onError(({ error }) => (error instanceof ApiError ? new Response(error.errorCode, { status: error.status }) : undefined))
    .use(apiAuthAfterBody())
    .post("/v1/x", ({ principal }) => `user ${principal.userId}`, {
      parse: ({ request }) => {
        if (!request.headers.has("x-skip")) metaOf(request).principal = principal;
        return {};
      },
    });
  const post = (headers: Record<string, string> = {}) => app.handle(new Request("http://localhost/v1/x", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: "{}" }));

  test("the principal the parse hook found reaches the handler", async () => {
    const res = await post();
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("user 3");
  });

  test("no principal found before it (no parse hook authenticated): 401, never let through", async () => {
    const res = await post({ "x-skip": "1" });
    expect(res.status).toBe(401);
    expect(await res.text()).toBe("missing_api_key");
  });
});

describe("the Authorization header's forms", () => {
  test("Bearer and the key, in any case and spacing the scheme allows; anything else is 401 invalid_authorization_header", () => {
    for (const header of [`Bearer ${SECRET}`, `bearer ${SECRET}`, `BEARER   ${SECRET}`, `Bearer\t${SECRET}`, `Bearer ${SECRET}  `]) {
      expect({ header, secret: bearerSecret(header) }).toEqual({ header, secret: SECRET });
    }
    for (const header of ["Bearer", "Bearer ", `Basic ${SECRET}`, `Bearer ${SECRET} extra`, `Bearer${SECRET}`, ` Bearer ${SECRET}`]) {
      let code: string | null = null;
      try {
        bearerSecret(header);
      } catch (e) {
        code = e instanceof ApiError ? e.errorCode : String(e);
      }
      expect({ header, code }).toEqual({ header, code: "invalid_authorization_header" });
    }
  });
});
