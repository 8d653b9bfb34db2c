/**
 * A graceful stop (SIGTERM in a rolling deploy) of one instance among several on one
 * PostgreSQL: the instance keeps its heartbeat while it drains, so the others leave the work it
 * is finishing alone (a synchronous generation answers 200, an async task succeeds, each charged
 * once), and stops beating only once it has drained; a stop whose work outlasts the grace
 * period still ends then, and the others refund what it left, once.
 */
import { afterEach, expect } from "bun:test";
import type { Config } from "../../src/config";
import type { GeneratedImage, ImageJob } from "../../src/core/engine";
import { scaledOnly } from "../support/backend";
import { ControlledEngine } from "../support/images";
import { startTestServer, type TestServer } from "../support/server";
import { until } from "../support/until";

const sharing = scaledOnly("instances sharing one database");

let servers: TestServer[] = [];
afterEach(async () => {
  for (const s of servers.reverse()) await s.close();
  servers = [];
});

/** A short lease, so that another instance would refund a silent one's work within a generation. */
const tune = (graceMs: number) => (c: Config) => {
  c.instance.heartbeat_ms = 100;
  c.instance.lease_ms = 400;
  c.server.shutdown_grace_ms = graceMs;
  c.server.log_requests = false;
};

/** An engine whose jobs start, then wait for `finish()` (or succeed after `ms`). */
function slowEngine(ms: number) {
  const engine = new ControlledEngine();
  let started = 0;
  engine.behave = async (job: ImageJob): Promise<GeneratedImage> => {
    started++;
    await Bun.sleep(ms);
    return engine.png(job);
  };
  return { engine, started: () => started };
}

const post = (server: TestServer, key: string, headers: Record<string, string> = {}) =>
  fetch(`${server.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "builtin-image", prompt: "a lighthouse", size: "64x64" }),
  });

interface Row {
  id: string;
  status: string;
  credits_refunded: number;
}

sharing.test("a draining instance keeps its lease: the request and the async task it finishes during the stop succeed, charged once", async () => {
  const slow = slowEngine(2_000); // five leases long
  const a = await startTestServer({ config: tune(20_000), customize: (s) => s.engines.registerBuiltinImage(slow.engine) });
  servers.push(a);
  const { userId, key } = await a.userWithKey({ credits: 5 });
  const answer = post(a, key);
  const accepted = await post(a, key, { prefer: "respond-async" });
  expect(accepted.status).toBe(202);
  const taskId = ((await accepted.json()) as { id: string }).id;
  await until(() => slow.started() === 2, "both generations to start on A");
  // B joins once A runs both (so it cannot be the one that claims the task), and sweeps every 100 ms.
  const b = await startTestServer({ config: (c) => (tune(20_000)(c), (c.server.data_dir = a.dataDir)) });
  servers.push(b);

  const began = performance.now();
  const stopping = a.stop(); // SIGTERM to A
  const res = await answer;
  expect(res.status).toBe(200);
  await stopping;
  // Over once drained (the 2 s generations), not at the 20 s grace.
  expect(performance.now() - began).toBeLessThan(10_000);

  const rows = await b.services.store.sql.all<Row>("SELECT id, status, credits_refunded FROM requests WHERE user_id = ? ORDER BY id", [userId]);
  expect(rows.map((r) => ({ status: r.status, credits_refunded: r.credits_refunded }))).toEqual([
    { status: "succeeded", credits_refunded: 0 },
    { status: "succeeded", credits_refunded: 0 },
  ]);
  expect((await b.services.store.tasks.get(taskId))?.status).toBe("succeeded");
  expect(await b.balance(userId)).toBe(3);
  expect(await b.services.store.credits.ledgerSum(userId)).toBe(3);
});

sharing.test("work that outlasts the grace period: the stop still ends at the grace, and another instance refunds what was left, once", async () => {
  const held = new ControlledEngine();
  held.hold();
  const a = await startTestServer({ config: tune(300), customize: (s) => s.engines.registerBuiltinImage(held) });
  servers.push(a);
  const b = await startTestServer({ config: (c) => (tune(300)(c), (c.server.data_dir = a.dataDir)) });
  servers.push(b);
  const { userId, key } = await a.userWithKey({ credits: 5 });
  const answer = post(a, key).catch(() => null); // cut off when A closes
  await until(() => held.waiting === 1, "the generation to start on A");

  const began = performance.now();
  await a.stop();
  expect(performance.now() - began).toBeLessThan(2_000);
  await answer;
  // A's lease runs out once it has stopped beating: B refunds the request as interrupted.
  await until(async () => (await b.balance(userId)) === 5, "B to refund A's unfinished request", 10_000);
  const rows = await b.services.store.sql.all<Row>("SELECT id, status, credits_refunded FROM requests WHERE user_id = ?", [userId]);
  expect(rows.map((r) => ({ status: r.status, credits_refunded: r.credits_refunded }))).toEqual([{ status: "interrupted", credits_refunded: 1 }]);
  expect(await b.services.store.credits.ledgerSum(userId)).toBe(5);
});
