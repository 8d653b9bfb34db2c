/**
 * A real async task announces its end by webhook: to the user's endpoint and to the request's
 * own webhook_url, signed per Standard Webhooks with the user's secret; a webhook_url without
 * Prefer: respond-async, or without a secret to sign with, is refused before any charge.
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
      received.push({ path: new URL(req.url).pathname, headers: { "webhook-id": h("webhook-id"), "webhook-timestamp": h("webhook-timestamp"), "webhook-signature": h("webhook-signature") }, body: await req.text() });
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
