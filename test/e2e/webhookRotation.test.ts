/**
 * A secret rotation against a real server (its own delivery worker, its store: SQLite, or
 * PostgreSQL on the scaled pass) and a real receiver on loopback that holds only the OLD secret,
 * as a receiver not yet updated does. Verification is independent of our signer:
 * test/support/standardWebhooks.ts (written from the Standard Webhooks text: HMAC-SHA256 over
 * `{id}.{timestamp}.{body}`, base64, any `v1,` entry of the space-separated list) and the official
 * openai client's webhooks.unwrap.
 *
 * Right after the rotation the receiver still accepts every delivery: a retry that was waiting
 * when the secret changed, and a new event. After the overlap ([webhooks] rotation_overlap_s, the
 * default day; the server's clock is moved forward) the old secret no longer verifies, the new
 * one does, and the previous secret is gone from the database. At rest, the row holds neither
 * secret in plain text.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Server } from "bun";
import OpenAI from "openai";
import type { ImageTaskObject } from "../../src/core/tasks";
import { verifyStandardWebhook } from "../support/standardWebhooks";
import { startTestServer, type TestServer } from "../support/server";
import { until } from "../support/until";

const DAY_MS = 86_400_000;

interface Hit {
  /** The server's clock when the hit arrived (the receiver's "now" for the timestamp check). */
  atS: number;
  headers: Record<string, string>;
  body: string;
}

/** Real time, moved forward by `skewMs` when a test jumps past the overlap. */
let skewMs = 0;
const serverClock = () => Date.now() + skewMs;

let server: TestServer;
let receiver: Server<undefined>;
const hits: Hit[] = [];
/** Statuses the receiver answers with, in order; 200 once empty. */
const script: number[] = [];

beforeAll(async () => {
  receiver = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      hits.push({ atS: Math.floor(serverClock() / 1000), headers: Object.fromEntries(request.headers), body: await request.text() });
      const status = script.shift() ?? 200;
      return new Response(status === 200 ? "thanks" : "not yet", { status });
    },
  });
  server = await startTestServer({
    toml: `[server]\nlog_requests = false\n[webhooks]\nallow_private_addresses = true\nretry_delays_ms = [1500]\npoll_interval_ms = 50\nattempt_timeout_ms = 2000\n`,
    clock: serverClock,
  });
  server.services.taskEvents.start();
});

afterAll(async () => {
  await server?.services.taskEvents.stop();
  await server?.close();
  receiver?.stop(true);
});

function task(id: string): ImageTaskObject {
  const s = Math.floor(serverClock() / 1000);
  return { id, object: "image.task", status: "succeeded", created_at: s - 2, started_at: s - 1, finished_at: s, model: "builtin-image", endpoint: "generations" } as ImageTaskObject;
}

const hitsFor = (taskId: string) => hits.filter((h) => h.body.includes(`"${taskId}"`));
const verifies = (secret: string, hit: Hit) => verifyStandardWebhook(secret, hit.headers, hit.body, hit.atS);

test("a receiver holding the old secret keeps verifying right after a rotation, and stops after the overlap", async () => {
  expect(server.services.config.webhooks.rotation_overlap_s).toBe(86_400);
  const hooks = server.services.taskEvents;
  const { userId } = await server.userWithKey();
  const set = await hooks.endpoints.setUrl(userId, `http://127.0.0.1:${receiver.port}/hooks`);
  expect(set.refused).toBeUndefined();
  const old = set.secret!;

  // An event whose first attempt fails: its retry is waiting when the secret is rotated.
  script.push(503);
  await hooks.taskFinished({ type: "image.task.succeeded", userId, task: task("req_in_flight") });
  await until(() => hitsFor("req_in_flight").length === 1, "the first attempt", 15_000);
  expect(verifies(old, hitsFor("req_in_flight")[0]!)).toBe(true);

  const fresh = await hooks.endpoints.rotateSecret(userId);
  const rotatedAt = serverClock();
  const expiresAt = (await hooks.endpoints.view(userId)).previousSecretExpiresAt!;
  expect(Math.abs(expiresAt - rotatedAt - DAY_MS)).toBeLessThan(5_000);

  // The secrets at rest: sealed, neither in plain text (nor its base64 part) in the row.
  const rows = await server.services.store.sql.all<Record<string, unknown>>("SELECT * FROM webhook_endpoints WHERE user_id = ?", [userId]);
  const dump = JSON.stringify(rows);
  for (const s of [old, fresh]) expect(dump.includes(s.slice("whsec_".length))).toBe(false);
  expect(rows[0]!.previous_secret_sealed).toMatch(/^v1\./);

  // The waiting retry is signed with both, the new one first: the old-secret receiver accepts it.
  await until(() => hitsFor("req_in_flight").length === 2, "the retry after the rotation", 15_000);
  const retry = hitsFor("req_in_flight")[1]!;
  const [first, second] = retry.headers["webhook-signature"]!.split(" ");
  expect(verifyStandardWebhook(fresh, { ...retry.headers, "webhook-signature": first! }, retry.body, retry.atS)).toBe(true);
  expect(verifyStandardWebhook(old, { ...retry.headers, "webhook-signature": second! }, retry.body, retry.atS)).toBe(true);
  expect(verifies(old, retry)).toBe(true);

  // A new event right after the rotation: accepted with the old secret, by our verifier and the official client.
  await hooks.taskFinished({ type: "image.task.succeeded", userId, task: task("req_after_rotation") });
  await until(() => hitsFor("req_after_rotation").length === 1, "the event after the rotation", 15_000);
  const after = hitsFor("req_after_rotation")[0]!;
  expect(verifies(old, after)).toBe(true);
  expect(verifies(fresh, after)).toBe(true);
  const openai = new OpenAI({ apiKey: "unused", baseURL: `${server.url}/v1` });
  expect(((await openai.webhooks.unwrap(after.body, after.headers, old)) as { data: { id: string } }).data.id).toBe("req_after_rotation");
  expect(((await openai.webhooks.unwrap(after.body, after.headers, fresh)) as { data: { id: string } }).data.id).toBe("req_after_rotation");

  // Past the overlap (the server's clock a day and a second on): the old secret no longer verifies.
  skewMs = expiresAt - Date.now() + 1_000;
  await hooks.taskFinished({ type: "image.task.succeeded", userId, task: task("req_after_overlap") });
  await until(() => hitsFor("req_after_overlap").length === 1, "the event after the overlap", 15_000);
  const late = hitsFor("req_after_overlap")[0]!;
  expect(late.headers["webhook-signature"]!.split(" ").length).toBe(1);
  expect(verifies(old, late)).toBe(false);
  expect(verifies(fresh, late)).toBe(true);
  // And it is gone from the database.
  const row = (await server.services.store.webhooks.endpoint(userId))!;
  expect([row.previous_secret_sealed, row.previous_secret_expires_at]).toEqual([null, null]);
}, 60_000);
