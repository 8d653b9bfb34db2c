/** /v1/models through the official `openai` client, as an unmodified application calls it. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startTestServer, type TestServer } from "../support/server";

let server: TestServer;
let key: string;
let userId: number;

beforeAll(async () => {
  server = await startTestServer({
    toml: `
[server]
builtin_chat = false

[[upstreams]]
id = "studio"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
[[upstreams.accounts]]
id = "main"
api_key = "sk-upstream"

[[models]]
id = "studio/flux.1 [dev]"
kind = "image"
upstream = "studio"
owned_by = "studio"
`,
  });
  ({ key, userId } = await server.userWithKey());
});
afterAll(() => server.close());

const client = (apiKey = key) => new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });

describe("openai client: models", () => {
  test("models.list returns the catalog: built-ins (minus the disabled one) and configured models", async () => {
    const models = [];
    for await (const m of client().models.list()) models.push(m);
    expect(models.map((m) => m.id)).toEqual(["builtin-image", "studio/flux.1 [dev]"]);
    for (const m of models) {
      expect(m.object).toBe("model");
      expect(Number.isInteger(m.created)).toBe(true);
    }
    expect(models[1]!.owned_by).toBe("studio");
  });

  test("models.retrieve, including an id with a slash, spaces and brackets", async () => {
    expect(await client().models.retrieve("builtin-image")).toMatchObject({ id: "builtin-image", object: "model", owned_by: "atelier" });
    expect((await client().models.retrieve("studio/flux.1 [dev]")).id).toBe("studio/flux.1 [dev]");
  });

  test("an unknown or disabled model: NotFoundError with code model_not_found", async () => {
    for (const id of ["no-such-model", "builtin-chat"]) {
      const error = await client().models.retrieve(id).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.NotFoundError);
      const e = error as InstanceType<typeof OpenAI.NotFoundError>;
      expect(e.status).toBe(404);
      expect(e.code).toBe("model_not_found");
      expect(e.param).toBe("model");
      expect(e.message).toContain(id);
      expect(e.requestID).toMatch(/^req_/);
    }
  });

  test("AuthenticationError for a missing, a wrong and a revoked key", async () => {
    // The client will not be built without a key, so it is told to drop the header instead.
    const noKey = new OpenAI({ apiKey: "unused", baseURL: `${server.url}/v1`, maxRetries: 0, defaultHeaders: { Authorization: null } });
    const missing = await noKey.models.list().catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((missing as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe("missing_api_key");
    expect((missing as Error).message).toContain("Authorization: Bearer");

    const wrong = await client(`sk-atl-${"0".repeat(43)}`).models.list().catch((e: unknown) => e);
    expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((wrong as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe("invalid_api_key");

    const other = await server.userWithKey();
    expect((await client(other.key).models.retrieve("builtin-image")).id).toBe("builtin-image");
    const row = (await server.services.store.keys.listForUser(other.userId))[0]!;
    await server.services.store.keys.revoke(row.id, Date.now());
    const revoked = await client(other.key).models.retrieve("builtin-image").catch((e: unknown) => e);
    expect(revoked).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((revoked as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe("invalid_api_key");
  });

  test("the key's last_used_at is recorded", async () => {
    await client().models.list();
    const keyRow = (await server.services.store.keys.listForUser(userId))[0]!;
    expect(keyRow.last_used_at).toBeGreaterThan(0);
  });
});
