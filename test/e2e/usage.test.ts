/**
 * GET /v1/usage after real requests (images that succeed and fail, chat, two keys): the counts
 * and credits equal the request history and the ledger exactly; bad ranges and groups are 400s.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { addUser, createKey } from "../../src/core/accounts";
import { UpstreamFailed } from "../../src/core/engine";
import { utcDay } from "../../src/core/utcDays";
import { startTestServer, type TestServer } from "../support/server";
import { ControlledEngine } from "../support/images";
import { middayClock } from "../support/fakeClock";

let server: TestServer;
const engine = new ControlledEngine();
// The server's clock, and the test's "today" (a run may cross a real UTC midnight).
const clock = middayClock();
let userId: number;
let keyA: string;
let keyB: string;
let prefixA: string;

beforeAll(async () => {
  server = await startTestServer({
    config: (c) => void (c.server.log_requests = false),
    customize: (s) => s.engines.registerBuiltinImage(engine),
    clock,
  });
  engine.behave = async (job) => {
    if (job.prompt === "fail") throw new UpstreamFailed("scripted failure");
    return engine.png(job);
  };
  const store = server.services.store;
  const user = await addUser(store, clock, { email: "usage@example.com", credits: 20 });
  userId = user.id;
  const a = await createKey(store, clock, userId, "alpha");
  const b = await createKey(store, clock, userId, "beta");
  keyA = a.key.secret;
  keyB = b.key.secret;
  prefixA = a.row.prefix;
  const ca = client(keyA);
  const cb = client(keyB);
  await ca.images.generate({ prompt: "one" });
  await ca.images.generate({ prompt: "two" });
  await ca.images.generate({ prompt: "fail" }).catch(() => undefined);
  await cb.images.generate({ prompt: "three" });
  await cb.chat.completions.create({ model: "builtin-chat", messages: [{ role: "user", content: "hi" }] });
  // Another user's requests never show.
  const other = await server.userWithKey({ credits: 5 });
  await client(other.key).images.generate({ prompt: "not yours" });
});
afterAll(() => server.close());

const client = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });

interface Usage {
  object: "usage";
  from: string;
  to: string;
  group_by: string;
  data: ({ group: string; label: string } & Record<string, number | string>)[];
  totals: { credits_spent: number; credits_charged: number; credits_refunded: number; requests: number } & Record<string, number>;
}

async function usage(query: string, key = keyA): Promise<{ status: number; body: Usage & { error?: { param: string | null; code: string | null } } }> {
  const res = await fetch(`${server.url}/v1/usage${query}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, body: (await res.json()) as Usage & { error?: { param: string | null; code: string | null } } };
}

describe("GET /v1/usage", () => {
  test("by day: the last 30 days with zeros, today's counts and credits equal to the history and the ledger", async () => {
    const { status, body } = await usage("");
    expect(status).toBe(200);
    const today = utcDay(clock());
    expect(body.group_by).toBe("day");
    expect(body.to).toBe(today);
    expect(body.data.length).toBe(30);
    expect(body.data.at(-1)!.group).toBe(today);
    const expected = { requests: 5, image_requests: 4, images: 3, chat_requests: 1, succeeded: 4, failed: 1, pending: 0, credits_charged: 4, credits_refunded: 1, credits_spent: 3 };
    expect(body.data.at(-1)).toEqual({ group: today, label: today, ...expected });
    expect(body.data.slice(0, -1).every((d) => d.requests === 0)).toBe(true);
    expect(body.totals).toEqual(expected);

    // The same figures from the ledger: charges and refunds of this user's requests.
    const ledger = await server.services.store.credits.ledger(userId, 1000);
    const charged = -ledger.filter((l) => l.kind === "charge").reduce((s, l) => s + l.amount, 0);
    const refunded = ledger.filter((l) => l.kind === "refund").reduce((s, l) => s + l.amount, 0);
    expect([body.totals.credits_charged, body.totals.credits_refunded]).toEqual([charged, refunded]);
    expect(await server.balance(userId)).toBe(20 - body.totals.credits_spent);
  });

  test("by model and by key", async () => {
    const byModel = (await usage("?group_by=model", keyB)).body;
    expect(byModel.data.map((d) => [d.group, d.requests, d.credits_spent])).toEqual([
      ["builtin-chat", 1, 0],
      ["builtin-image", 4, 3],
    ]);
    const byKey = (await usage("?group_by=key")).body;
    const a = byKey.data.find((d) => d.group === prefixA)!;
    expect(a).toMatchObject({ label: "alpha", requests: 3, images: 2, failed: 1, credits_spent: 2 });
    expect(byKey.data.find((d) => d.label === "beta")).toMatchObject({ requests: 2, images: 1, chat_requests: 1, credits_spent: 1 });
    expect(byKey.data.length).toBe(2);
  });

  test("an explicit range: a past range is empty; one day is one row", async () => {
    const { body } = await usage("?from=2020-01-01&to=2020-01-31");
    expect(body.data.length).toBe(31);
    expect(body.totals.requests).toBe(0);
    const today = utcDay(clock());
    const one = (await usage(`?from=${today}&to=${today}`)).body;
    expect(one.data.map((d) => d.requests)).toEqual([5]);
  });

  test("bad queries: 400 with the parameter at fault", async () => {
    const cases: [string, string][] = [
      ["?group_by=week", "group_by"],
      ["?from=2020-01-01&to=2021-06-01", "from"],
      ["?from=2021-02-01&to=2021-01-01", "from"],
      ["?to=2021-02-30", "to"],
      ["?from=yesterday", "from"],
    ];
    for (const [query, param] of cases) {
      const { status, body } = await usage(query);
      expect(status).toBe(400);
      expect(body.error).toMatchObject({ param, code: "invalid_value" });
    }
    expect((await fetch(`${server.url}/v1/usage`)).status).toBe(401);
  });
});
