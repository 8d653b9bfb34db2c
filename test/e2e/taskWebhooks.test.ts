/**
 * A real async task announces its end by webhook: to the user's endpoint and to the request's
 * own webhook_url, signed per Standard Webhooks with the user's secret; a webhook_url without
 * Prefer: respond-async, or without a secret to sign with, is refused before any charge. A
 * receiver's failing answer is recorded with the attempt, even when it holds U+0000.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startTestServer, type TestServer } from "../support/server";
import { verifyStandardWebhook } from "../support/standardWebhooks";
import { until } from "../support/until";

let server: TestServer;
const received: { path: string; headers: Record<string, string | null>; body: string }[] = [];
let receiver: ReturnType<typeof Bun.serve>;

beforeAll(async () => {
  receiver = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const h = (n: string) => req.headers.get(n);
      const path = new URL(req.url).pathname;
      received.push({ path, headers: { "webhook-id": h("webhook-id"), "webhook-timestamp": h("webhook-timestamp"), "webhook-signature": h("webhook-signature") }, body: await req.text() });
      // A receiver failing with U+0000 in its answer, which the attempt's record quotes.
      if (path === "/nul-hook") return new Response("oops\u0000", { status: 500 });
      return new Response("ok");
    },
  });
  server = await startTestServer({
    toml: `[webhooks]\nallow_private_addresses = true\npoll_interval_ms = 50\n`,
    config: (c) => void (c.server.log_requests = false),
  });
});
afterAll(async () => {
  await server.close();
  receiver.stop(true);
});

const post = (key: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

test("image.task.succeeded reaches the user's endpoint and the request's webhook_url, signed with the user's secret", async () => {
  const { key, userId } = await server.userWithKey({ credits: 3 });
  const endpoints = server.services.taskEvents.endpoints;
  const saved = await endpoints.setUrl(userId, `http://127.0.0.1:${receiver.port}/account-hook`);
  expect(saved.refused).toBeUndefined();
  // The first endpoint makes the secret (shown once).
  const secret = saved.secret!;
  const res = await post(key, { prompt: "a fox", size: "64x64", webhook_url: `http://127.0.0.1:${receiver.port}/request-hook` }, { prefer: "respond-async" });
  expect(res.status).toBe(202);
  const { id } = await res.json();
  await until(() => received.filter((r) => r.body.includes(id)).length === 2, "both webhooks", 10_000);
  const mine = received.filter((r) => r.body.includes(id));
  expect(mine.map((r) => r.path).sort()).toEqual(["/account-hook", "/request-hook"]);
  for (const r of mine) {
    expect(verifyStandardWebhook(secret, r.headers, r.body, Math.floor(Date.now() / 1000))).toBe(true);
    const event = JSON.parse(r.body);
    expect(event.type).toBe("image.task.succeeded");
    expect(event.data).toMatchObject({ id, object: "image.task", status: "succeeded" });
  }
});

test("webhook_url is refused before any charge: without Prefer: respond-async, and without a secret to sign with", async () => {
  const { key, userId } = await server.userWithKey({ credits: 2 });
  const sync = await post(key, { prompt: "a fox", size: "64x64", webhook_url: `http://127.0.0.1:${receiver.port}/x` });
  expect(sync.status).toBe(400);
  expect((await sync.json()).error).toMatchObject({ param: "webhook_url", code: "webhook_url_requires_async" });
  const unsigned = await post(key, { prompt: "a fox", size: "64x64", webhook_url: `http://127.0.0.1:${receiver.port}/x` }, { prefer: "respond-async" });
  expect(unsigned.status).toBe(400);
  expect((await unsigned.json()).error).toMatchObject({ param: "webhook_url", code: "invalid_webhook_url" });
  expect(await server.balance(userId)).toBe(2);
});

test("a receiver's 500 whose answer holds U+0000 is recorded (with U+FFFD): the attempt counts, the next is scheduled, not repeated at once", async () => {
  const { key, userId } = await server.userWithKey({ credits: 1 });
  const endpoints = server.services.taskEvents.endpoints;
  expect((await endpoints.setUrl(userId, `http://127.0.0.1:${receiver.port}/nul-hook`)).refused).toBeUndefined();
  const res = await post(key, { prompt: "a fox", size: "64x64" }, { prefer: "respond-async" });
  expect(res.status).toBe(202);
  const { id } = await res.json();
  const delivery = async () => (await endpoints.deliveries(userId, 10))[0];
  // Before, the record failed on PostgreSQL: the count stayed 0 and the delivery was sent again each time its lease ran out.
  await until(async () => (await delivery())?.delivery.attempts === 1, "the attempt recorded", 10_000);
  const d = (await delivery())!;
  expect(d.delivery).toMatchObject({ state: "pending", last_status: 500 });
  expect(d.delivery.last_error).toContain("oops\uFFFD");
  expect(d.delivery.next_attempt_at).toBeGreaterThan(Date.now());
  expect(d.attempts.map((a) => a.status)).toEqual([500]);
  expect(received.filter((r) => r.path === "/nul-hook" && r.body.includes(id)).length).toBe(1);
});
