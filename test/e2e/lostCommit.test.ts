/**
 * PostgreSQL connections that break around a COMMIT (a network blip, a pooler restart): the
 * server cannot tell whether the transaction committed, and must still keep the money rule.
 * PostgreSQL sits behind a proxy (test/support/lostCommit.ts) that loses one chosen COMMIT:
 * - the charge's: the client is told 503 "nothing was changed", so whatever committed is
 *   undone (refunded once) in the background, and a client that retries pays once;
 * - the success's or the refund's: whenWritable runs it again, which finds the row already
 *   ended by its own earlier run: the image is delivered (charged once), the refund reported
 *   as made (once).
 * These run on PostgreSQL on both passes: SQLite has no connection to lose.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startPostgres, type TestPostgres } from "../support/postgresServer";
import { startLostCommitProxy, type LostCommitMode, type LostCommitProxy } from "../support/lostCommit";
import { startTestServer, type TestServer } from "../support/server";
import { until } from "../support/until";
import { ControlledEngine } from "../support/images";
import { UpstreamFailed } from "../../src/core/engine";

let pg: TestPostgres;
let proxy: LostCommitProxy;
let server: TestServer;

beforeAll(async () => {
  pg = await startPostgres({ migrated: true });
  proxy = startLostCommitProxy(Number(new URL(pg.url).port));
  server = await startTestServer({
    config: (c) => {
      c.database.url = proxy.urlFor(pg.url);
      c.server.log_requests = false;
    },
  });
});
afterAll(async () => {
  await server.close();
  proxy.stop();
  await pg.stop();
});

const generate = (key: string, prompt: string) =>
  fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "builtin-image", prompt, size: "64x64" }),
  });

interface Row {
  status: string;
  error_code: string | null;
  credits_charged: number;
  credits_refunded: number;
}
/** The log line of a lost charge's settling, by request id. */
const settled = (id: string) =>
  server.logs.map((l) => JSON.parse(l) as { msg: string; request_id?: string; level: string; refunded?: boolean }).find((l) => l.msg === "settled a charge whose commit was lost" && l.request_id === id);
const ledgerSum = async (userId: number) => (await pg.client().get<{ s: number | null }>("SELECT CAST(SUM(amount) AS BIGINT) AS s FROM ledger WHERE user_id = ?", [userId]))?.s ?? 0;

describe("the charge's COMMIT is lost: the client is told nothing was changed, and nothing stays changed", () => {
  // The prompt is a parameter of the charge's INSERT, sent on every run: it marks that transaction.
  const cases: { mode: LostCommitMode; what: string; committed: boolean }[] = [
    { mode: "reply", what: "committed, its answer lost", committed: true },
    { mode: "never", what: "never reached the server", committed: false },
    { mode: "late", what: "reaching the server a second after the client gave up", committed: true },
  ];
  for (const { mode, what, committed } of cases) {
    test(`the COMMIT ${what}: 503, ${committed ? "the charge refunded once" : "nothing written"}; the retry is charged once`, async () => {
      const { userId, key } = await server.userWithKey({ credits: 5 });
      const prompt = `a lighthouse (lost commit: ${mode})`;
      const lostBefore = proxy.lost;
      proxy.arm(prompt, mode, 1_000);
      const res = await generate(key, prompt);
      expect(proxy.lost).toBe(lostBefore + 1);
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("database_unavailable");

      // Settled in the background once the database answers: what the charge committed (if
      // anything) is refunded once.
      const id = res.headers.get("x-request-id")!;
      await until(() => settled(id) !== undefined, "the lost charge to be settled");
      expect(settled(id)?.refunded).toBe(committed);
      const byId = await pg.client().all<Row>("SELECT status, error_code, credits_charged, credits_refunded FROM requests WHERE id = ?", [id]);
      expect(byId).toEqual(committed ? [{ status: "failed", error_code: "database_unavailable", credits_charged: 1, credits_refunded: 1 }] : []);
      expect(await server.balance(userId)).toBe(5);
      expect(await ledgerSum(userId)).toBe(5);

      // The client retries, as the 503 told it to: one image, one credit.
      const retried = await generate(key, prompt);
      expect(retried.status).toBe(200);
      await server.services.background.idle();
      expect(await server.balance(userId)).toBe(4);
      expect(await ledgerSum(userId)).toBe(4);
      expect(await server.services.store.credits.ledgerMismatches()).toBe(0);
    });
  }
});

test("an async task's charge COMMIT is lost (committed, its answer lost): 503, and the queued task's credit comes back once", async () => {
  const { userId, key } = await server.userWithKey({ credits: 5 });
  const prompt = "a lighthouse (lost commit: async task)";
  proxy.arm(prompt, "reply");
  const res = await fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" },
    body: JSON.stringify({ model: "builtin-image", prompt, size: "64x64" }),
  });
  expect(res.status).toBe(503);
  const id = res.headers.get("x-request-id")!;
  await until(() => settled(id) !== undefined, "the lost charge to be settled");
  await server.services.background.idle();
  const task = await pg.client().get<{ status: string; error: string | null }>("SELECT status, error FROM tasks WHERE id = ?", [id]);
  if (settled(id)?.refunded) {
    expect(task?.status).toBe("failed");
    expect(JSON.parse(task!.error!)).toMatchObject({ code: "database_unavailable" });
    expect(await server.balance(userId)).toBe(5);
  } else {
    // Another look for queued tasks (this instance polls the shared queue) claimed it before
    // the settling did: it ran and succeeded, and its success made the settling change nothing.
    expect(task?.status).toBe("succeeded");
    expect(await server.balance(userId)).toBe(4);
  }
  expect(await ledgerSum(userId)).toBe(await server.balance(userId));
});

test("the success's COMMIT is lost (committed, its answer lost): the retried record finds it done, and the client gets its image, charged once", async () => {
  // A server of its own: the statement's text (the marker) goes over a connection only the
  // first time that connection prepares it, so no success may have been recorded before.
  const own = await startTestServer({
    config: (c) => {
      c.database.url = proxy.urlFor(pg.url);
      c.server.log_requests = false;
    },
  });
  try {
    const { userId, key } = await own.userWithKey({ credits: 5 });
    const lostBefore = proxy.lost;
    proxy.arm("UPDATE requests SET status = 'succeeded'", "reply");
    const res = await fetch(`${own.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-image", prompt: "a lighthouse (lost commit: success)", size: "64x64" }),
    });
    expect(proxy.lost).toBe(lostBefore + 1);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: { b64_json?: string }[] }).data[0]?.b64_json).toBeString();
    await own.services.background.idle();
    const id = res.headers.get("x-request-id")!;
    expect(await pg.client().get<Row>("SELECT status, error_code, credits_charged, credits_refunded FROM requests WHERE id = ?", [id])).toEqual({
      status: "succeeded", error_code: null, credits_charged: 1, credits_refunded: 0,
    });
    expect(await own.balance(userId)).toBe(4);
    expect(await ledgerSum(userId)).toBe(4);
  } finally {
    await own.close();
  }
});

test("a refund's COMMIT is lost (committed, its answer lost): the retried refund finds it done and reports it refunded, once", async () => {
  // A server of its own, for the same reason as above (the marker is the refund's statement text).
  const failing = new ControlledEngine();
  failing.behave = async () => {
    throw new UpstreamFailed("the upstream failed");
  };
  const own = await startTestServer({
    config: (c) => {
      c.database.url = proxy.urlFor(pg.url);
      c.server.log_requests = false;
    },
    customize: (s) => s.engines.registerBuiltinImage(failing),
  });
  try {
    const { userId, key } = await own.userWithKey({ credits: 5 });
    const lostBefore = proxy.lost;
    proxy.arm("credits_refunded = credits_charged", "reply");
    const res = await fetch(`${own.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-image", prompt: "a lighthouse (lost commit: refund)", size: "64x64" }),
    });
    expect(res.status).toBe(502);
    await own.services.background.idle();
    expect(proxy.lost).toBe(lostBefore + 1);
    const id = res.headers.get("x-request-id")!;
    const line = own.logs.map((l) => JSON.parse(l) as { msg: string; request_id?: string; refunded?: boolean }).find((l) => l.msg === "image request failed" && l.request_id === id);
    expect(line?.refunded).toBe(true);
    expect(await pg.client().all<{ kind: string; amount: number }>("SELECT kind, amount FROM ledger WHERE request_id = ? ORDER BY id", [id])).toEqual([
      { kind: "charge", amount: -1 },
      { kind: "refund", amount: 1 },
    ]);
    expect(await own.balance(userId)).toBe(5);
    expect(await ledgerSum(userId)).toBe(5);
  } finally {
    await own.close();
  }
});
