/**
 * The admin's user tools through the workbench's HTTP forms (app.handle, the real store in
 * memory): create a user (sign-up's password rule), set a new password (their sessions end),
 * see and revoke a user's keys, spend per user; and the all-requests filters (user, key,
 * model, status, dates, request id).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { createKey } from "../../src/core/accounts";
import type { ImageCharge } from "../../src/core/store";
import { WORKBENCH_PASSWORD, workbenchApp } from "../support/workbenchApp";

// Generous: every test hashes passwords (argon2id), slow on a shared 2-core machine.
const TIMEOUT_MS = 60_000;
let app: ReturnType<typeof workbenchApp> | undefined;
afterEach(() => app?.close());

/** A fresh workbench for one test, closed after it. */
async function makeApp() {
  app = workbenchApp();
  return app;
}

describe("create a user", () => {
  test("with sign-up's password rule, starting credits as a ledger grant by the admin; they can sign in at once", async () => {
    const { store, session, signIn, logs } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const made = await admin.post("/admin/users", { email: "new@example.com", password: WORKBENCH_PASSWORD, credits: "12", role: "user" });
    expect(made.status).toBe(303);
    const user = (await store.users.byEmail("new@example.com"))!;
    expect(made.headers.get("location")).toBe(`/admin/users/${user.id}?done=created`);
    expect(user).toMatchObject({ role: "user", credits: 12 });
    expect(await store.credits.ledger(user.id)).toMatchObject([{ kind: "grant", amount: 12, actor: "admin:boss@example.com" }]);
    expect(await signIn("new@example.com")).not.toBeNull();
    expect(logs.join("\n")).not.toContain(WORKBENCH_PASSWORD);

    const refused = async (fields: Record<string, string>, says: string) => {
      const res = await admin.post("/admin/users", { email: "x@example.com", password: WORKBENCH_PASSWORD, credits: "0", role: "user", ...fields });
      expect(res.status).toBe(400);
      expect(await res.text()).toContain(says);
    };
    await refused({ password: "short" }, "Password must be at least 10 characters.");
    await refused({ email: "not-an-email" }, "The email must be a valid email address.");
    await refused({ email: "NEW@example.com" }, "A user with the email NEW@example.com already exists.");
    await refused({ credits: "-1" }, "Starting credits are a whole number");
    await refused({ role: "root" }, "Choose the role user or admin.");
    expect(await store.users.byEmail("x@example.com")).toBeNull();

    const plain = await session("plain@example.com");
    expect((await plain.post("/admin/users", { email: "y@example.com", password: WORKBENCH_PASSWORD, role: "admin" })).status).toBe(403);
    expect(await store.users.byEmail("y@example.com")).toBeNull();
  }, TIMEOUT_MS);
});

describe("one user's page", () => {
  test("a new password ends their sessions: the old one stops working, the new one signs in", async () => {
    const { session, signIn } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const user = await session("user@example.com");
    expect((await admin.post(`/admin/users/${user.id}/password`, { password: "short" })).status).toBe(400);
    const reset = await admin.post(`/admin/users/${user.id}/password`, { password: "a brand new password" });
    expect(reset.headers.get("location")).toBe(`/admin/users/${user.id}?done=password`);
    const after = await user.get("/credits");
    expect(after.status).toBe(303);
    expect(after.headers.get("location")).toStartWith("/signin");
    expect(await signIn("user@example.com")).toBeNull();
    expect(await signIn("user@example.com", "a brand new password")).not.toBeNull();
    // The admin's own session is untouched by another user's reset.
    expect((await admin.get(`/admin/users/${user.id}?done=password`)).status).toBe(200);
  }, TIMEOUT_MS);

  test("shows the user's keys with their spend; Revoke makes the key answer 401; another user's key is not theirs to revoke", async () => {
    const { store, session, handle } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const user = await session("user@example.com");
    const other = await session("other@example.com");
    await store.credits.grant(user.id, 10, Date.now());
    const { key, row } = await createKey(store, Date.now, user.id, "laptop <script>");
    const { row: otherKey } = await createKey(store, Date.now, other.id, "theirs");
    const charge = (id: string, price: number): ImageCharge => ({ requestId: id, userId: user.id, keyId: row.id, kind: "generate", model: "m", price, prompt: "p" });
    await store.credits.chargeForImage(charge("r1", 3), Date.now());
    await store.credits.chargeForImage(charge("r2", 2), Date.now());
    await store.credits.refundOnce("r2", { status: "failed", errorCode: "x", errorMessage: "x" }, Date.now());

    const page = await (await admin.get(`/admin/users/${user.id}`)).text();
    expect(page).toContain("laptop &lt;script&gt;");
    expect(page).toContain(`${row.prefix}…`);
    expect(page).toMatch(/data-testid="user-spent">3 credits</);
    expect(page).toMatch(/data-testid="user-balance">7 credits</);
    const list = await (await admin.get("/admin?q=user%40example.com")).text();
    expect(list).toMatch(/data-testid="spent">3</);

    const models = () => handle("/v1/models", { headers: { authorization: `Bearer ${key.secret}` } });
    expect((await models()).status).toBe(200);
    expect((await admin.post(`/admin/users/${user.id}/keys/${otherKey.id}/revoke`, {})).status).toBe(404);
    expect((await store.keys.byPrefix(otherKey.prefix))!.revoked_at).toBeNull();
    const revoked = await admin.post(`/admin/users/${user.id}/keys/${row.id}/revoke`, {});
    expect(revoked.headers.get("location")).toBe(`/admin/users/${user.id}?done=revoked`);
    expect((await models()).status).toBe(401);
    expect((await user.post(`/admin/users/${user.id}/keys/${row.id}/revoke`, {})).status).toBe(403);
  }, TIMEOUT_MS);
});

describe("all requests: filters", () => {
  test("by user, key, model, status, dates and request id; an unknown user or key matches nothing and says so", async () => {
    const { store, session } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const a = await session("ann@example.com");
    const b = await session("bob@example.com");
    await store.credits.grant(a.id, 50, Date.now());
    await store.credits.grant(b.id, 50, Date.now());
    const { row: aKey } = await createKey(store, Date.now, a.id, "ann-key");
    const day = (d: string) => Date.parse(`${d}T12:00:00Z`);
    const put = async (id: string, userId: number, keyId: number | null, model: string, at: number, fail = false) => {
      await store.credits.chargeForImage({ requestId: id, userId, keyId, kind: "generate", model, price: 1, prompt: `prompt ${id}` }, at);
      if (fail) (await store.credits.refundOnce(id, { status: "failed", errorCode: "upstream_failed", errorMessage: "boom" }, at));
      else (await store.requests.markSucceeded(id, { queueMs: 1, generationMs: 2 }, at));
    };
    await put("req_a1", a.id, aKey.id, "alpha", day("2026-03-01"));
    await put("req_a2", a.id, null, "beta", day("2026-03-05"), true);
    await put("req_b1", b.id, null, "alpha", day("2026-03-09"));

    const ids = async (query: string) => {
      const res = await admin.get(`/admin/requests?${query}`);
      expect(res.status).toBe(200);
      const html = await res.text();
      return { ids: [...html.matchAll(/data-request-id="([^"]+)"/g)].map((m) => m[1]), html };
    };
    expect((await ids("")).ids).toEqual(["req_b1", "req_a2", "req_a1"]);
    expect((await ids("user=ANN%40example.com")).ids).toEqual(["req_a2", "req_a1"]);
    expect((await ids(`key=${encodeURIComponent(aKey.prefix)}`)).ids).toEqual(["req_a1"]);
    expect((await ids(`key=${encodeURIComponent(`${aKey.prefix}…`)}`)).ids).toEqual(["req_a1"]);
    expect((await ids("model=alpha")).ids).toEqual(["req_b1", "req_a1"]);
    expect((await ids("status=failed")).ids).toEqual(["req_a2"]);
    expect((await ids("from=2026-03-05&to=2026-03-05")).ids).toEqual(["req_a2"]);
    expect((await ids("from=2026-03-02")).ids).toEqual(["req_b1", "req_a2"]);
    expect((await ids("to=2026-03-08")).ids).toEqual(["req_a2", "req_a1"]);
    expect((await ids("id=req_b1")).ids).toEqual(["req_b1"]);
    expect((await ids("user=bob%40example.com&model=beta")).ids).toEqual([]);
    // Not a date: ignored rather than trusted.
    expect((await ids("from=2026-02-30")).ids).toHaveLength(3);
    const nobody = await ids("user=nobody%40example.com");
    expect(nobody.ids).toEqual([]);
    expect(nobody.html).toContain("No user has the email nobody@example.com.");
    const noKey = await ids("key=sk-atl-XXXXXXXX");
    expect(noKey.ids).toEqual([]);
    expect(noKey.html).toContain("No key has the prefix sk-atl-XXXXXXXX.");
    // The filter is kept in the form and across pages.
    expect((await ids("user=ann%40example.com&from=2026-03-01")).html).toContain('value="2026-03-01"');
  }, TIMEOUT_MS);
});
