/**
 * One user's webhooks cannot hold the delivery worker: a user whose receiver hangs, with a
 * backlog of deliveries, gets at most perUserSlots attempts at once, and another user's event
 * goes out while theirs hang. Test events (free) are bounded per user.
 */
import { afterEach, expect, test } from "bun:test";
import { createLogger } from "../../src/logger";
import { WebhookDispatcher } from "../../src/core/webhooks";
import { MAX_PENDING_TESTS, perUserSlots } from "../../src/core/webhooksFairness";
import { SecretBox } from "../../src/core/webhooksSecretBox";
import { addUser, memoryStore } from "../support/memoryStore";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function dispatcherOn(store: ReturnType<typeof memoryStore>, concurrency: number) {
  return new WebhookDispatcher({
    records: store.webhooks, box: new SecretBox(() => new Uint8Array(32).fill(7)), whenWritable: store.whenWritable,
    clock: Date.now, logger: createLogger(() => {}), resolve: async () => ["127.0.0.1"], random: () => 0,
    settings: { allowPrivateAddresses: true, retryDelaysMs: [5_000, 300_000], attemptTimeoutMs: 3_000, concurrency, pollIntervalMs: 1_000, rotationOverlapMs: 0 },
  });
}

test("another user's webhook goes out while one user's backlog hangs on their receiver", async () => {
  let slowNow = 0, slowMost = 0, fastHits = 0;
  const release: (() => void)[] = [];
  const receiver = Bun.serve({
    port: 0, idleTimeout: 0,
    async fetch(req) {
      if (new URL(req.url).pathname !== "/slow") { fastHits++; return new Response("ok"); }
      slowMost = Math.max(slowMost, ++slowNow);
      await new Promise<void>((r) => release.push(r));
      slowNow--;
      return new Response("late");
    },
  });
  const store = memoryStore();
  const d = dispatcherOn(store, 8);
  cleanups.push(() => store.close(), () => receiver.stop(true), () => d.stop(), () => release.splice(0).forEach((r) => r()));
  const mallory = addUser(store, 0), alice = addUser(store, 0);
  await d.endpoints.setUrl(mallory, `http://hooks.test:${receiver.port}/slow`);
  await d.endpoints.setUrl(alice, `http://hooks.test:${receiver.port}/fast`);
  // A backlog of 40 real-looking events (test events are bounded, task events are not), older than alice's.
  for (let i = 0; i < 40; i++) await d.taskFinished({ type: "image.task.failed", userId: mallory, task: { id: `task_m${i}` } } as never);
  d.start();
  // Mallory's attempts are hanging before alice's event exists (so round robin alone cannot
  // put it first); nothing of mallory's answers until released, so alice's hit can only come
  // from a slot mallory could not take.
  while (slowNow < perUserSlots(8)) await Bun.sleep(20);
  await Bun.sleep(200);
  await d.sendTestEvent(alice);
  const deadline = performance.now() + 2_500;
  while (fastHits === 0 && performance.now() < deadline) await Bun.sleep(20);
  expect(fastHits).toBe(1);
  expect(slowNow).toBe(perUserSlots(8));
  expect(slowMost).toBe(perUserSlots(8));
});

test(`a user may have ${MAX_PENDING_TESTS} test events pending, not more; delivered ones make room`, async () => {
  const store = memoryStore();
  const d = dispatcherOn(store, 8);
  cleanups.push(() => store.close());
  const receiver = Bun.serve({ port: 0, fetch: () => new Response("ok") });
  cleanups.push(() => receiver.stop(true));
  const user = addUser(store, 0), other = addUser(store, 0);
  await d.endpoints.setUrl(user, `http://hooks.test:${receiver.port}/`);
  await d.endpoints.setUrl(other, `http://hooks.test:${receiver.port}/`);
  for (let i = 0; i < MAX_PENDING_TESTS; i++) expect(await d.sendTestEvent(user)).toBeNull();
  expect(await d.sendTestEvent(user)).toBe("too_many_pending");
  // Per user: another user is not refused because of this one.
  expect(await d.sendTestEvent(other)).toBeNull();
  await d.claimAndDeliver();
  await d.idle();
  expect(await d.sendTestEvent(user)).toBeNull();
});
