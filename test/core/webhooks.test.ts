/**
 * The webhook dispatcher below the server: events recorded (once per task and outcome, without
 * image bytes), signed attempts to a real loopback receiver pinned by address with the original
 * Host, retries by the schedule, 410 and give-up, redirects and slow receivers, bounded answers,
 * the claim lease (a crash mid-attempt means the attempt is made again), endpoint changes,
 * sealed secrets, and checkWebhookUrl. Real SQLite in memory, a fake clock, a scripted resolver;
 * the worker's timer is not started: each test claims and awaits the attempts itself.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import type { Server } from "bun";
import { existsSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { createLogger } from "../../src/logger";
import { WebhookDispatcher, taskEventId, type WebhookSettings } from "../../src/core/webhooks";
import { SecretBox, secretContext } from "../../src/core/webhooksSecretBox";
import { WebhookKeyCheck, WebhookKeyMismatch } from "../../src/core/webhooksKeyCheck";
import { DEFAULT_RETRY_DELAYS_MS } from "../../src/core/webhooksSchedule";
import { createServices } from "../../src/services";
import { loadWebhookSecretKey } from "../../src/store/webhooks";
import { configFromToml } from "../support/server";
import { tempDir } from "../support/tempDirs";
import type { ImageTaskObject, TaskEvent } from "../../src/core/tasks";
import type { Store } from "../../src/store";
import { fakeClock, type FakeClock } from "../support/fakeClock";
import { addUser, memoryStore, rawDb } from "../support/memoryStore";
import { verifyStandardWebhook } from "../support/standardWebhooks";

interface Hit {
  path: string;
  host: string | null;
  headers: Record<string, string>;
  body: string;
}

type Answer = (hit: Hit) => Response | Promise<Response>;

let receiver: Server<undefined>;
const hits: Hit[] = [];
let answers: Answer[] = [];
const ok: Answer = () => new Response("ok");

beforeAll(() => {
  receiver = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const url = new URL(request.url);
      const hit: Hit = { path: url.pathname + url.search, host: request.headers.get("host"), headers: Object.fromEntries(request.headers), body: await request.text() };
      hits.push(hit);
      return (answers.shift() ?? ok)(hit);
    },
  });
});
afterAll(() => receiver.stop(true));

const port = () => receiver.port;
/** Names resolve to loopback (the receiver), as a public name would to a public address. */
const resolve = async (host: string) => {
  if (host.endsWith(".test")) return ["127.0.0.1"];
  throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
};

let store: Store;
let clock: FakeClock;
let logs: string[];
let dispatcher: WebhookDispatcher;
const KEY = new Uint8Array(32).fill(7);

function makeDispatcher(settings: Partial<WebhookSettings> = {}, box = new SecretBox(() => KEY)): WebhookDispatcher {
  return new WebhookDispatcher({
    records: store.webhooks,
    box,
    whenWritable: store.whenWritable,
    clock: clock.now,
    logger: createLogger((l) => logs.push(l)),
    resolve,
    random: () => 0,
    settings: { allowPrivateAddresses: true, retryDelaysMs: [5_000, 300_000], attemptTimeoutMs: 2_000, concurrency: 4, pollIntervalMs: 1_000, rotationOverlapMs: 86_400_000, ...settings },
  });
}

function setup(settings: Partial<WebhookSettings> = {}) {
  store = memoryStore();
  clock = fakeClock(1_800_000_000_000);
  logs = [];
  hits.length = 0;
  answers = [];
  dispatcher = makeDispatcher(settings);
}
afterEach(() => store?.close());

function task(id: string, over: Partial<ImageTaskObject> = {}): ImageTaskObject {
  return {
    id,
    object: "image.task",
    status: "succeeded",
    created_at: 1_800_000_000,
    started_at: 1_800_000_001,
    finished_at: 1_800_000_002,
    model: "builtin-image",
    endpoint: "generations",
    result: { created: 1_800_000_002, data: [{ b64_json: "iVBORw0KGgoAAAA".repeat(1000), revised_prompt: "a lighthouse" }], size: "64x64" } as unknown as ImageTaskObject["result"],
    ...over,
  };
}

function event(userId: number, id = "req_task1", over: Partial<TaskEvent> = {}): TaskEvent {
  return { type: "image.task.succeeded", userId, task: task(id), ...over };
}

/** Claims what is due and waits for those attempts. */
async function deliverDue(): Promise<number> {
  const n = await dispatcher.claimAndDeliver();
  await dispatcher.idle();
  return n;
}

async function userWithEndpoint(path = "/hook"): Promise<{ userId: number; secret: string }> {
  const userId = addUser(store, 0);
  const set = await dispatcher.endpoints.setUrl(userId, `http://hooks.test:${port()}${path}`);
  if (set.refused !== undefined || set.secret === null) throw new Error(`no endpoint: ${set.refused}`);
  return { userId, secret: set.secret };
}

const deliveriesOf = (userId: number) => dispatcher.endpoints.deliveries(userId, 50);

describe("recording events", () => {
  test("one delivery per task outcome and URL; the body is {type, timestamp, data} without image bytes", async () => {
    setup();
    const { userId } = await userWithEndpoint();
    await dispatcher.taskFinished(event(userId));
    await dispatcher.taskFinished(event(userId)); // the same outcome again: nothing new
    await dispatcher.taskFinished(event(userId, "req_task1", { type: "image.task.failed" })); // another outcome is another event
    await Bun.sleep(0);
    const rows = (await deliveriesOf(userId)).map((d) => d.delivery);
    expect(rows.length).toBe(2);
    const succeeded = rows.find((r) => r.event_type === "image.task.succeeded")!;
    expect(succeeded.event_id).toBe(taskEventId("image.task.succeeded", "req_task1"));
    expect(succeeded.event_id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(succeeded.state).toBe("pending");
    expect(succeeded.next_attempt_at).toBe(clock.now());
    expect(succeeded.source).toBe("endpoint");
    const body = JSON.parse(succeeded.payload);
    expect(body.type).toBe("image.task.succeeded");
    expect(body.timestamp).toBe(new Date(clock.now()).toISOString());
    expect(body.data.id).toBe("req_task1");
    expect(body.data.object).toBe("image.task");
    expect(body.data.result.data).toEqual([{ revised_prompt: "a lighthouse" }]);
    expect(succeeded.payload.length).toBeLessThan(1000);
  });

  test("a user with no endpoint and no webhook_url records nothing; a request's webhook_url is a delivery of its own", async () => {
    setup();
    const bare = addUser(store, 0);
    await dispatcher.taskFinished(event(bare));
    expect(await deliveriesOf(bare)).toEqual([]);

    const { userId } = await userWithEndpoint();
    await dispatcher.taskFinished(event(userId, "req_2", { webhookUrl: `http://per-request.test:${port()}/mine?task=2` }));
    // The same URL as the endpoint is one delivery, not two.
    await dispatcher.taskFinished(event(userId, "req_3", { webhookUrl: `http://hooks.test:${port()}/hook` }));
    await dispatcher.taskFinished(event(userId, "req_4", { webhookUrl: "not a url" }));
    const rows = (await deliveriesOf(userId)).map((d) => [d.delivery.source, d.delivery.url, JSON.parse(d.delivery.payload).data.id]);
    expect(rows).toEqual([
      ["endpoint", `http://hooks.test:${port()}/hook`, "req_4"],
      ["endpoint", `http://hooks.test:${port()}/hook`, "req_3"],
      ["request", `http://per-request.test:${port()}/mine?task=2`, "req_2"],
      ["endpoint", `http://hooks.test:${port()}/hook`, "req_2"],
    ]);
    expect(logs.some((l) => l.includes("task webhook_url not usable"))).toBe(true);
  });

  test("taskFinished never throws, even when the store does", async () => {
    setup();
    const { userId } = await userWithEndpoint();
    await store.close();
    expect(() => dispatcher.taskFinished(event(userId))).not.toThrow();
    await dispatcher.idle();
    expect(logs.some((l) => l.includes("task webhook not recorded"))).toBe(true);
    store = memoryStore();
  });
});

describe("attempts", () => {
  test("a signed POST to the pinned address with the original Host; 2xx delivers", async () => {
    setup();
    const { userId, secret } = await userWithEndpoint("/hook?from=atelier");
    await dispatcher.taskFinished(event(userId));
    expect(await deliverDue()).toBe(1);
    expect(hits.length).toBe(1);
    const hit = hits[0]!;
    expect(hit.path).toBe("/hook?from=atelier");
    expect(hit.host).toBe(`hooks.test:${port()}`);
    expect(hit.headers["content-type"]).toBe("application/json");
    expect(hit.headers["user-agent"]).toBe("Atelier-Webhooks/1");
    expect(hit.headers["webhook-id"]).toBe(taskEventId("image.task.succeeded", "req_task1"));
    expect(hit.headers["webhook-timestamp"]).toBe(String(Math.floor(clock.now() / 1000)));
    expect(verifyStandardWebhook(secret, hit.headers, hit.body, Math.floor(clock.now() / 1000))).toBe(true);
    const [d] = await deliveriesOf(userId);
    expect(d!.delivery.state).toBe("delivered");
    expect(d!.delivery.attempts).toBe(1);
    expect(d!.delivery.next_attempt_at).toBeNull();
    expect(d!.attempts.map((a) => [a.status, a.error])).toEqual([[200, null]]);
    expect(await deliverDue()).toBe(0);
  });

  test("failures are retried by the schedule with the same id and a new timestamp, then delivered", async () => {
    setup();
    const { userId, secret } = await userWithEndpoint();
    answers = [() => new Response("boom", { status: 500 }), () => new Response("busy", { status: 503 })];
    await dispatcher.taskFinished(event(userId));
    await deliverDue();
    let [d] = await deliveriesOf(userId);
    expect(d!.delivery.state).toBe("pending");
    expect(d!.delivery.next_attempt_at).toBe(clock.now() + 5_000);
    expect(d!.delivery.last_error).toBe("HTTP 500: boom");
    // Not due yet.
    clock.advance(4_999);
    expect(await deliverDue()).toBe(0);
    clock.advance(1);
    expect(await deliverDue()).toBe(1);
    [d] = await deliveriesOf(userId);
    expect(d!.delivery.next_attempt_at).toBe(clock.now() + 300_000);
    clock.advance(300_000);
    await deliverDue();
    [d] = await deliveriesOf(userId);
    expect(d!.delivery.state).toBe("delivered");
    expect(d!.attempts.map((a) => a.status)).toEqual([500, 503, 200]);
    expect(new Set(hits.map((h) => h.headers["webhook-id"])).size).toBe(1);
    expect(new Set(hits.map((h) => h.headers["webhook-timestamp"])).size).toBe(3);
    // Every attempt verifies at its own time.
    const times = [1_800_000_000_000, 1_800_000_005_000, 1_800_000_305_000];
    hits.forEach((h, i) => expect(verifyStandardWebhook(secret, h.headers, h.body, Math.floor(times[i]! / 1000))).toBe(true));
  });

  test("the schedule runs out: failed after 1 + delays attempts; 410 Gone ends it at once", async () => {
    setup({ retryDelaysMs: [10, 10] });
    const { userId } = await userWithEndpoint();
    answers = [0, 1, 2].map(() => () => new Response("no", { status: 500 }));
    await dispatcher.taskFinished(event(userId));
    for (let i = 0; i < 3; i++) {
      await deliverDue();
      clock.advance(10);
    }
    let [d] = await deliveriesOf(userId);
    expect(d!.delivery.state).toBe("failed");
    expect(d!.delivery.attempts).toBe(3);
    expect(d!.delivery.last_error).toBe("HTTP 500: no (gave up after 3 attempts)");
    expect(d!.delivery.finished_at).not.toBeNull();
    expect(logs.some((l) => l.includes("webhook delivery failed"))).toBe(true);

    answers = [() => new Response("gone", { status: 410 })];
    await dispatcher.taskFinished(event(userId, "req_gone"));
    await deliverDue();
    [d] = await deliveriesOf(userId);
    expect(d!.delivery.state).toBe("failed");
    expect(d!.delivery.attempts).toBe(1);
    expect(d!.delivery.last_error).toContain("410 Gone: no further attempts");
  });

  test("redirects are not followed, slow receivers time out, long answers are read only in part", async () => {
    setup({ attemptTimeoutMs: 300 });
    const { userId } = await userWithEndpoint();
    answers = [
      () => new Response(null, { status: 302, headers: { location: `http://127.0.0.1:${port()}/elsewhere` } }),
      async () => {
        await Bun.sleep(1_000);
        return new Response("late");
      },
      () => new Response("x".repeat(5_000_000), { status: 500 }),
    ];
    for (const id of ["req_a", "req_b", "req_c"]) {
      await dispatcher.taskFinished(event(userId, id));
      await deliverDue();
    }
    expect(hits.map((h) => h.path)).toEqual(["/hook", "/hook", "/hook"]);
    const errors = (await deliveriesOf(userId)).map((d) => d.attempts[0]!.error!).reverse();
    expect(errors[0]).toBe(`HTTP 302: redirects are not followed (to http://127.0.0.1:${port()}/elsewhere); set the final URL`);
    expect(errors[1]).toBe("no answer within 300 ms");
    expect(errors[2]).toBe(`HTTP 500: ${"x".repeat(200)}…`);
    await Bun.sleep(800); // let the slow answer finish before the next test
  });

  test("a crash during an attempt: the claim's lease runs out and the attempt is made again", async () => {
    setup();
    const { userId } = await userWithEndpoint();
    await dispatcher.taskFinished(event(userId));
    // Claimed by a process that then died before recording anything.
    const claimed = await store.webhooks.claimDue(clock.now(), 10, clock.now() + 32_000);
    expect(claimed.length).toBe(1);
    expect(await deliverDue()).toBe(0);
    clock.advance(32_000);
    expect(await deliverDue()).toBe(1);
    expect((await deliveriesOf(userId))[0]!.delivery.state).toBe("delivered");
    expect(hits.length).toBe(1);
  });

  test("two dispatchers on one store (two instances) never attempt the same delivery at once: each is claimed by one", async () => {
    setup({ concurrency: 3 });
    const { userId } = await userWithEndpoint();
    const other = makeDispatcher({ concurrency: 3 });
    const open = new Map<string, number>();
    let overlapping = 0;
    const slow: Answer = async (hit) => {
      const id = hit.headers["webhook-id"]!;
      if ((open.get(id) ?? 0) > 0) overlapping++;
      open.set(id, (open.get(id) ?? 0) + 1);
      await Bun.sleep(20);
      open.set(id, open.get(id)! - 1);
      return new Response("ok");
    };
    const EVENTS = 12;
    answers = Array.from({ length: EVENTS }, () => slow);
    for (let i = 0; i < EVENTS; i++) await dispatcher.taskFinished(event(userId, `req_two${i}`));
    const claimedBy = [0, 0];
    for (let round = 0; round < EVENTS; round++) {
      // Both look at the same moment, and again while the other's attempts are still running.
      const [a, b] = await Promise.all([dispatcher.claimAndDeliver(), other.claimAndDeliver()]);
      claimedBy[0]! += a;
      claimedBy[1]! += b;
      if (a + b === 0) break;
      await Promise.all([dispatcher.idle(), other.idle()]);
    }
    expect(claimedBy[0]! + claimedBy[1]!).toBe(EVENTS);
    expect(claimedBy[0]).toBeGreaterThan(0);
    expect(claimedBy[1]).toBeGreaterThan(0);
    expect(overlapping).toBe(0);
    expect(hits.length).toBe(EVENTS);
    expect(new Set(hits.map((h) => h.headers["webhook-id"])).size).toBe(EVENTS);
    const rows = await deliveriesOf(userId);
    expect(rows.map((d) => [d.delivery.state, d.delivery.attempts, d.attempts.length])).toEqual(Array.from({ length: EVENTS }, () => ["delivered", 1, 1]));
  });

  test("no more than `concurrency` attempts at once", async () => {
    setup({ concurrency: 2 });
    // Two users: one alone would get only perUserSlots(2) = 1 at once (webhooksFairness).
    const { userId } = await userWithEndpoint();
    const { userId: other } = await userWithEndpoint();
    let inFlight = 0;
    let most = 0;
    const slow: Answer = async () => {
      most = Math.max(most, ++inFlight);
      await Bun.sleep(50);
      inFlight--;
      return new Response("ok");
    };
    answers = [slow, slow, slow, slow, slow];
    for (let i = 0; i < 5; i++) await dispatcher.taskFinished(event(i % 2 ? other : userId, `req_c${i}`));
    expect(await dispatcher.claimAndDeliver()).toBe(2);
    expect(await dispatcher.claimAndDeliver()).toBe(0);
    await dispatcher.idle();
    while ((await deliverDue()) > 0);
    expect(most).toBe(2);
    for (const u of [userId, other]) expect((await deliveriesOf(u)).every((d) => d.delivery.state === "delivered")).toBe(true);
  });

  test("the worker's own timer delivers at once and retries when due (start/stop)", async () => {
    setup({ retryDelaysMs: [100], pollIntervalMs: 50 });
    // A real clock for the timer.
    dispatcher = new WebhookDispatcher({
      records: store.webhooks,
      box: new SecretBox(() => KEY),
      whenWritable: store.whenWritable,
      clock: Date.now,
      logger: createLogger((l) => logs.push(l)),
      resolve,
      settings: { allowPrivateAddresses: true, retryDelaysMs: [100], attemptTimeoutMs: 2_000, concurrency: 4, pollIntervalMs: 50, rotationOverlapMs: 0 },
    });
    const { userId } = await userWithEndpoint();
    answers = [() => new Response("first fails", { status: 500 })];
    dispatcher.start();
    dispatcher.start();
    await dispatcher.taskFinished(event(userId));
    for (let i = 0; i < 100 && (await deliveriesOf(userId))[0]?.delivery.state !== "delivered"; i++) await Bun.sleep(20);
    await dispatcher.stop();
    const [d] = await deliveriesOf(userId);
    expect(d!.attempts.map((a) => a.status)).toEqual([500, 200]);
    expect(d!.attempts[1]!.attempted_at - d!.attempts[0]!.attempted_at).toBeGreaterThanOrEqual(100);
  });
});

describe("endpoints and secrets", () => {
  test("URLs are checked before saving: refused when private, unless allowed; the first URL makes the first secret", async () => {
    setup({ allowPrivateAddresses: false });
    const userId = addUser(store, 0);
    const refused = await dispatcher.endpoints.setUrl(userId, `http://127.0.0.1:${port()}/hook`);
    expect(refused.refused).toBe("Webhooks may only go to public addresses: 127.0.0.1 is a loopback address.");
    expect(await dispatcher.endpoints.view(userId)).toEqual({ url: null, secretCreatedAt: null, previousSecretExpiresAt: null });
    expect((await dispatcher.endpoints.setUrl(userId, "ftp://example.com")).refused).toContain("http://");

    const open = makeDispatcher({ allowPrivateAddresses: true });
    const first = await open.endpoints.setUrl(userId, ` http://hooks.test:${port()}/a `);
    expect(first.secret).toMatch(/^whsec_/);
    expect(await open.endpoints.view(userId)).toEqual({ url: `http://hooks.test:${port()}/a`, secretCreatedAt: clock.now(), previousSecretExpiresAt: null });
    // A second URL keeps the secret.
    const second = await open.endpoints.setUrl(userId, `http://hooks.test:${port()}/b`);
    expect(second.secret).toBeNull();
    expect(await open.endpoints.secretsOf(userId)).toEqual([first.secret!]);
  });

  test("secrets are stored sealed: the database holds neither the secret nor its key bytes", async () => {
    setup();
    const { userId, secret } = await userWithEndpoint();
    const rotated = await dispatcher.endpoints.rotateSecret(userId);
    expect(rotated).not.toBe(secret);
    const dump = JSON.stringify(rawDb(store).query("SELECT * FROM webhook_endpoints").all());
    for (const s of [secret, rotated]) {
      expect(dump).not.toContain(s);
      expect(dump).not.toContain(s.slice(6, 30));
    }
    expect(dump).toContain('"secret_sealed":"v1.');
    // The replaced secret is kept for the overlap, sealed the same way under the same user.
    const row = (await store.webhooks.endpoint(userId))!;
    expect(row.previous_secret_sealed).toStartWith("v1.");
    expect(new SecretBox(() => KEY).open(row.previous_secret_sealed!, secretContext(userId))).toBe(secret);
    expect(await dispatcher.endpoints.secretsOf(userId)).toEqual([rotated, secret]);
    // Another user's row with this ciphertext does not open (the user id is bound in).
    const other = addUser(store, 0);
    await store.webhooks.rotateSecret(other, (await store.webhooks.endpoint(userId))!.secret_sealed!, clock.now(), null);
    await expect(dispatcher.endpoints.secretsOf(other)).rejects.toThrow();
    // Under another key nothing opens.
    const wrongKey = makeDispatcher({}, new SecretBox(() => new Uint8Array(32).fill(9)));
    await expect(wrongKey.endpoints.secretsOf(userId)).rejects.toThrow();
    // A row that does not open under the right key (sealed for another user): its attempt says
    // so instead of sending unsigned.
    rawDb(store).run("UPDATE webhook_endpoints SET secret_sealed = ?, previous_secret_sealed = NULL, previous_secret_expires_at = NULL WHERE user_id = ?", [
      new SecretBox(() => KEY).seal("whsec_AAAA", secretContext(userId + 999)),
      userId,
    ]);
    await dispatcher.taskFinished(event(userId));
    await deliverDue();
    expect(hits.length).toBe(0);
    expect((await deliveriesOf(userId))[0]!.attempts[0]!.error).toBe("the signing secret cannot be opened with this server's key: rotate it on the Webhooks page");
  });

  test("retries after a rotation are signed with the new secret", async () => {
    setup();
    const { userId } = await userWithEndpoint();
    answers = [() => new Response("no", { status: 500 })];
    await dispatcher.taskFinished(event(userId));
    await deliverDue();
    const rotated = await dispatcher.endpoints.rotateSecret(userId);
    clock.advance(5_000);
    await deliverDue();
    expect(verifyStandardWebhook(rotated, hits[1]!.headers, hits[1]!.body, Math.floor(clock.now() / 1000))).toBe(true);
  });

  test("pending deliveries follow a changed endpoint, and fail when it is removed", async () => {
    setup();
    const { userId } = await userWithEndpoint("/old");
    await dispatcher.taskFinished(event(userId, "req_1"));
    await dispatcher.taskFinished(event(userId, "req_2", { webhookUrl: `http://mine.test:${port()}/own` }));
    await dispatcher.endpoints.setUrl(userId, `http://hooks.test:${port()}/new`);
    expect((await deliveriesOf(userId)).map((d) => d.delivery.url)).toEqual([`http://mine.test:${port()}/own`, `http://hooks.test:${port()}/new`, `http://hooks.test:${port()}/new`]);
    await dispatcher.endpoints.clear(userId);
    const after = (await deliveriesOf(userId)).map((d) => [d.delivery.source, d.delivery.state, d.delivery.last_error]);
    expect(after).toEqual([
      ["request", "pending", null],
      ["endpoint", "failed", "the endpoint was removed"],
      ["endpoint", "failed", "the endpoint was removed"],
    ]);
    expect((await dispatcher.endpoints.view(userId)).url).toBeNull();
    expect(await dispatcher.endpoints.hasSecret(userId)).toBe(true);
    await deliverDue();
    expect(hits.map((h) => h.path)).toEqual(["/own"]);
  });

  test("a test event goes to the endpoint; without one it is refused", async () => {
    setup();
    const bare = addUser(store, 0);
    expect(await dispatcher.sendTestEvent(bare)).toBe("no_endpoint");
    const { userId, secret } = await userWithEndpoint();
    expect(await dispatcher.sendTestEvent(userId)).toBeNull();
    await deliverDue();
    const body = JSON.parse(hits[0]!.body);
    expect(body.type).toBe("webhook.test");
    expect(hits[0]!.headers["webhook-id"]).toMatch(/^msg_[A-Za-z0-9]{24}$/);
    expect(verifyStandardWebhook(secret, hits[0]!.headers, hits[0]!.body, Math.floor(clock.now() / 1000))).toBe(true);
    expect((await deliveriesOf(userId))[0]!.delivery.source).toBe("test");
  });
});

describe("rotation overlap: the previous secret signs beside the new one until it expires", () => {
  const DAY_MS = 86_400_000;
  const nowS = () => Math.floor(clock.now() / 1000);
  /** The entries of the last hit's webhook-signature, each checked alone against `secrets` (in order). */
  const lastSignedWith = (...secrets: string[]) => {
    const hit = hits.at(-1)!;
    const entries = hit.headers["webhook-signature"]!.split(" ");
    return entries.length === secrets.length && entries.every((entry, i) => verifyStandardWebhook(secrets[i]!, { ...hit.headers, "webhook-signature": entry }, hit.body, nowS()));
  };
  const lastVerifiesWith = (secret: string) => verifyStandardWebhook(secret, hits.at(-1)!.headers, hits.at(-1)!.body, nowS());
  const previousColumns = async (userId: number) => {
    const row = (await store.webhooks.endpoint(userId))!;
    return [row.previous_secret_sealed === null ? null : "sealed", row.previous_secret_expires_at];
  };
  let n = 0;
  /** One event for the user, delivered now. */
  async function deliverOne(userId: number): Promise<void> {
    await dispatcher.taskFinished(event(userId, `req_rot${++n}`));
    expect(await deliverDue()).toBe(1);
  }

  test("during the overlap every attempt carries both signatures, the new one first; from its expiry only the new one, and the expired secret is deleted when next used", async () => {
    setup();
    const { userId, secret: old } = await userWithEndpoint();
    await deliverOne(userId);
    expect(lastSignedWith(old)).toBe(true);

    const rotatedAt = clock.now();
    const fresh = await dispatcher.endpoints.rotateSecret(userId);
    expect((await dispatcher.endpoints.view(userId)).previousSecretExpiresAt).toBe(rotatedAt + DAY_MS);
    await deliverOne(userId);
    expect(lastSignedWith(fresh, old)).toBe(true);
    expect(lastVerifiesWith(old)).toBe(true);

    // The last second of the overlap (attempts run every minute from here on do the same).
    clock.advance(DAY_MS - 1_000);
    await deliverOne(userId);
    expect(lastSignedWith(fresh, old)).toBe(true);

    // At the expiry: the previous secret neither signs nor shows, and the attempt that found it
    // expired deleted it (no sweep has run: the last one was under an hour ago).
    clock.advance(1_000);
    expect((await dispatcher.endpoints.view(userId)).previousSecretExpiresAt).toBeNull();
    expect(await previousColumns(userId)).toEqual(["sealed", rotatedAt + DAY_MS]);
    expect(await dispatcher.endpoints.secretsOf(userId)).toEqual([fresh]);
    expect(await previousColumns(userId)).toEqual([null, null]);
    await deliverOne(userId);
    expect(lastSignedWith(fresh)).toBe(true);
    expect(lastVerifiesWith(old)).toBe(false);
  });

  test("a retry waiting when the secret is rotated is signed with both, so a receiver still on the old secret accepts it", async () => {
    setup();
    const { userId, secret: old } = await userWithEndpoint();
    answers = [() => new Response("no", { status: 500 })];
    await dispatcher.taskFinished(event(userId));
    await deliverDue();
    const fresh = await dispatcher.endpoints.rotateSecret(userId);
    clock.advance(5_000);
    await deliverDue();
    expect(hits.length).toBe(2);
    expect(lastSignedWith(fresh, old)).toBe(true);
    expect((await deliveriesOf(userId))[0]!.delivery.state).toBe("delivered");
  });

  test("rotating again during an overlap: the current secret becomes the previous one with a fresh overlap, the older one stops at once", async () => {
    setup();
    const { userId, secret: first } = await userWithEndpoint();
    const second = await dispatcher.endpoints.rotateSecret(userId);
    clock.advance(3_600_000);
    const again = clock.now();
    const third = await dispatcher.endpoints.rotateSecret(userId);
    expect(await dispatcher.endpoints.secretsOf(userId)).toEqual([third, second]);
    expect((await dispatcher.endpoints.view(userId)).previousSecretExpiresAt).toBe(again + DAY_MS);
    await deliverOne(userId);
    expect(lastSignedWith(third, second)).toBe(true);
    expect(lastVerifiesWith(first)).toBe(false);
    // The second one's overlap counts from the second rotation, not the first.
    clock.advance(DAY_MS - 3_600_000);
    await deliverOne(userId);
    expect(lastSignedWith(third, second)).toBe(true);
    clock.advance(3_600_000);
    await deliverOne(userId);
    expect(lastSignedWith(third)).toBe(true);
  });

  test("without overlap (asked for, or rotation_overlap_s = 0) the replaced secret stops at once", async () => {
    setup();
    const { userId, secret: old } = await userWithEndpoint();
    const fresh = await dispatcher.endpoints.rotateSecret(userId, { keepPrevious: false });
    expect(await previousColumns(userId)).toEqual([null, null]);
    expect((await dispatcher.endpoints.view(userId)).previousSecretExpiresAt).toBeNull();
    await deliverOne(userId);
    expect(lastSignedWith(fresh)).toBe(true);
    expect(lastVerifiesWith(old)).toBe(false);
    // Asked for during an overlap, it also ends the running one.
    const next = await dispatcher.endpoints.rotateSecret(userId);
    expect(await dispatcher.endpoints.secretsOf(userId)).toEqual([next, fresh]);
    const last = await dispatcher.endpoints.rotateSecret(userId, { keepPrevious: false });
    expect(await dispatcher.endpoints.secretsOf(userId)).toEqual([last]);

    dispatcher = makeDispatcher({ rotationOverlapMs: 0 });
    const other = await userWithEndpoint();
    const otherFresh = await dispatcher.endpoints.rotateSecret(other.userId);
    expect(await previousColumns(other.userId)).toEqual([null, null]);
    expect(await dispatcher.endpoints.secretsOf(other.userId)).toEqual([otherFresh]);
  });

  test("the hourly sweep deletes expired previous secrets of users who get no deliveries; one still in its overlap stays", async () => {
    setup();
    const early = await userWithEndpoint();
    const late = await userWithEndpoint();
    await dispatcher.claimAndDeliver(); // the first sweep, with nothing to do
    await dispatcher.endpoints.rotateSecret(early.userId);
    clock.advance(2 * 3_600_000);
    await dispatcher.endpoints.rotateSecret(late.userId);
    clock.advance(DAY_MS - 3_600_000); // early's overlap ended an hour ago, late's has an hour left
    expect(await dispatcher.claimAndDeliver()).toBe(0);
    expect(await previousColumns(early.userId)).toEqual([null, null]);
    expect(await previousColumns(late.userId)).toEqual(["sealed", clock.now() + 3_600_000]);
    expect(hits.length).toBe(0);
  });

  test("the previous secret is stored sealed: the row holds neither secret, and it opens only for its user", async () => {
    setup();
    const { userId, secret: old } = await userWithEndpoint();
    const fresh = await dispatcher.endpoints.rotateSecret(userId);
    const raw = rawDb(store).query("SELECT * FROM webhook_endpoints WHERE user_id = ?").get(userId) as Record<string, unknown>;
    const dump = JSON.stringify(raw);
    for (const s of [old, fresh]) {
      expect(dump).not.toContain(s);
      expect(dump).not.toContain(s.slice(6, 30));
      expect(dump).not.toContain(Buffer.from(s.slice(6), "base64").toString("hex").slice(0, 24));
    }
    expect(raw.previous_secret_sealed).toMatch(/^v1\.[A-Za-z0-9+/]+={0,2}$/);
    expect(raw.previous_secret_sealed).not.toBe(raw.secret_sealed);
    const box = new SecretBox(() => KEY);
    expect(box.open(raw.previous_secret_sealed as string, secretContext(userId))).toBe(old);
    expect(() => box.open(raw.previous_secret_sealed as string, secretContext(userId + 1))).toThrow();
    // Copied into another user's row, it does not open there: that user's attempts fail unsigned.
    const other = await userWithEndpoint();
    rawDb(store).query("UPDATE webhook_endpoints SET previous_secret_sealed = ?, previous_secret_expires_at = ? WHERE user_id = ?").run(raw.previous_secret_sealed as string, clock.now() + DAY_MS, other.userId);
    await expect(dispatcher.endpoints.secretsOf(other.userId)).rejects.toThrow();
    await deliverOne(other.userId);
    expect(hits.length).toBe(0);
    expect((await deliveriesOf(other.userId))[0]!.attempts[0]!.error).toBe("the signing secret cannot be opened with this server's key: rotate it on the Webhooks page");
  });
});

describe("the key the stored secrets were sealed with (webhooksKeyCheck)", () => {
  const OTHER = new Uint8Array(32).fill(9);
  const checkValue = () => store.webhooks.keyCheck();

  test("nothing is checked, and no key read (so no key file made), while no secret is sealed", async () => {
    setup();
    let loads = 0;
    await makeDispatcher({}, new SecretBox(() => (loads++, KEY))).keyCheck.verify();
    expect(loads).toBe(0);
    expect(await checkValue()).toBeNull();
  });

  test("the first seal makes its key the database's: that key starts again, another is refused at start and cannot seal", async () => {
    setup();
    const { userId } = await userWithEndpoint();
    const stored = await checkValue();
    expect(stored).not.toBeNull();
    // It tells keys apart without being one: not the key's bytes.
    expect(Buffer.from(stored!).equals(Buffer.from(KEY))).toBe(false);
    await dispatcher.keyCheck.verify();
    const wrong = makeDispatcher({}, new SecretBox(() => OTHER));
    await expect(wrong.keyCheck.verify()).rejects.toBeInstanceOf(WebhookKeyMismatch);
    await expect(wrong.keyCheck.verify()).rejects.toThrow(/same \[webhooks\] secret_key.*webhook-secrets\.key.*forget-secrets/);
    const before = (await store.webhooks.endpoint(userId))!.secret_sealed;
    await expect(wrong.endpoints.rotateSecret(userId)).rejects.toBeInstanceOf(WebhookKeyMismatch);
    expect((await store.webhooks.endpoint(userId))!.secret_sealed).toBe(before);
    expect(await dispatcher.endpoints.secretsOf(userId)).toHaveLength(1);
  });

  test("two servers with different keys on an empty database: the first to seal wins, the other's seal is refused", async () => {
    setup();
    const other = makeDispatcher({}, new SecretBox(() => OTHER));
    // Both started: nothing was sealed yet, so neither could tell.
    await dispatcher.keyCheck.verify();
    await other.keyCheck.verify();
    const { userId } = await userWithEndpoint();
    const u2 = addUser(store, 0);
    await expect(other.endpoints.rotateSecret(u2)).rejects.toBeInstanceOf(WebhookKeyMismatch);
    expect(await store.webhooks.endpoint(u2)).toBeNull();
    expect(await dispatcher.endpoints.secretsOf(userId)).toHaveLength(1);
  });

  test("a database whose secrets were sealed before the check: the key that opens one is recorded, another is refused", async () => {
    setup();
    await userWithEndpoint();
    rawDb(store).run("DELETE FROM server_secrets WHERE name = 'webhook_key_check'");
    await expect(makeDispatcher({}, new SecretBox(() => OTHER)).keyCheck.verify()).rejects.toBeInstanceOf(WebhookKeyMismatch);
    expect(await checkValue()).toBeNull();
    await dispatcher.keyCheck.verify();
    expect(await checkValue()).not.toBeNull();
    await expect(makeDispatcher({}, new SecretBox(() => OTHER)).keyCheck.verify()).rejects.toBeInstanceOf(WebhookKeyMismatch);
  });

  test("a server that finds, while it runs, that its key is not the database's takes no deliveries (none recorded); the right key delivers them; it resumes once its key fits", async () => {
    setup();
    const { userId, secret } = await userWithEndpoint();
    const foreign = makeDispatcher({}, new SecretBox(() => OTHER));
    await foreign.taskFinished(event(userId));
    expect(await foreign.claimAndDeliver()).toBe(1);
    await foreign.idle();
    expect(hits).toHaveLength(0);
    expect((await deliveriesOf(userId))[0]!.attempts).toHaveLength(0);
    expect(logs.filter((l) => l.includes("webhook deliveries paused on this server"))).toHaveLength(1);
    // Its claim's lease runs out; paused, it takes nothing, and the right key delivers it.
    clock.advance(40_000);
    expect(await foreign.claimAndDeliver()).toBe(0);
    expect(await deliverDue()).toBe(1);
    expect(hits).toHaveLength(1);
    expect(verifyStandardWebhook(secret, hits[0]!.headers, hits[0]!.body, Math.floor(clock.now() / 1000))).toBe(true);
    // The secrets forgotten (the database has no key now): at its next look it resumes.
    await store.webhooks.forgetSecrets();
    await dispatcher.taskFinished(event(userId, "req_task2"));
    clock.advance(61_000);
    expect(await foreign.claimAndDeliver()).toBe(1);
    await foreign.idle();
    expect(logs.some((l) => l.includes("webhook deliveries resumed on this server"))).toBe(true);
  });

  test("a key file that is gone while the database holds secrets is said to be missing, and none is made in its place", async () => {
    setup();
    await userWithEndpoint();
    let loads = 0;
    const keyless = makeDispatcher({}, new SecretBox(() => (loads++, OTHER)));
    const check = new WebhookKeyCheck(store.webhooks, new SecretBox(() => (loads++, OTHER)), clock.now, () => false);
    await expect(check.verify()).rejects.toMatchObject({ why: "missing" });
    expect(loads).toBe(0);
    await expect(keyless.keyCheck.verify()).rejects.toMatchObject({ why: "another key" });
  });

  test("saving a first endpoint URL with a key that may not seal is refused before the URL is saved", async () => {
    setup();
    await userWithEndpoint();
    const foreign = makeDispatcher({}, new SecretBox(() => OTHER));
    const u = addUser(store, 0);
    await expect(foreign.endpoints.setUrl(u, `http://hooks.test:${port()}/hook`)).rejects.toBeInstanceOf(WebhookKeyMismatch);
    expect(await store.webhooks.endpoint(u)).toBeNull();
  });

  test("forgetting the secrets (the key is lost) lets another key start and seal; the old key is then the stranger", async () => {
    setup();
    const { userId } = await userWithEndpoint();
    expect(await store.webhooks.forgetSecrets()).toBe(1);
    expect(await dispatcher.endpoints.secretsOf(userId)).toBeNull();
    const other = makeDispatcher({}, new SecretBox(() => OTHER));
    await other.keyCheck.verify();
    const secret = await other.endpoints.rotateSecret(userId);
    expect(await other.endpoints.secretsOf(userId)).toEqual([secret]);
    await expect(dispatcher.keyCheck.verify()).rejects.toBeInstanceOf(WebhookKeyMismatch);
  });
});

describe("checkWebhookUrl (a request's own webhook_url)", () => {
  test("needs a signing secret and a URL that passes the rule", async () => {
    setup({ allowPrivateAddresses: false });
    const userId = addUser(store, 0);
    expect(await dispatcher.checkWebhookUrl("https://hooks.example.com/x", userId)).toBe(
      "A webhook_url needs a signing secret to sign with: create one on the workbench's Webhooks page first.",
    );
    await dispatcher.endpoints.rotateSecret(userId);
    expect(await dispatcher.checkWebhookUrl("http://10.0.0.1/x", userId)).toBe("Webhooks may only go to public addresses: 10.0.0.1 is a private address.");
    expect(await dispatcher.checkWebhookUrl("gopher://x", userId)).toBe("A webhook URL must start with http:// or https://.");
    expect(await dispatcher.checkWebhookUrl("http://nowhere.example/x", userId)).toBe("The host nowhere.example could not be resolved (ENOTFOUND).");
    expect(await dispatcher.checkWebhookUrl("http://8.8.8.8/x", userId)).toBeNull();
  });
});

describe("housekeeping", () => {
  test("finished deliveries older than the retention are pruned with their attempts", async () => {
    setup();
    const { userId } = await userWithEndpoint();
    await dispatcher.taskFinished(event(userId));
    await deliverDue();
    expect(await store.webhooks.pruneFinished(clock.now())).toBe(0);
    expect(await store.webhooks.pruneFinished(clock.now() + 10_000)).toBe(1);
    expect(rawDb(store).query("SELECT COUNT(*) AS n FROM webhook_attempts").get()).toEqual({ n: 0 });
  });
});

describe("[webhooks] configuration and the secret key", () => {
  test("secret_key must be the base64 of 32 bytes; other keys are typed and bounded", () => {
    const errorOf = (toml: string) => {
      try {
        configFromToml(toml);
        return null;
      } catch (e) {
        return (e as Error).message;
      }
    };
    expect(errorOf(`[webhooks]\nsecret_key = "c2hvcnQ="\n`)).toContain("webhooks.secret_key: must be the base64 of 32 random bytes");
    expect(errorOf(`[webhooks]\nsecret_key = "${Buffer.alloc(32, 3).toString("base64")}"\n`)).toBeNull();
    expect(errorOf(`[webhooks]\nallow_private_addresses = "yes"\n`)).toContain("webhooks.allow_private_addresses");
    expect(errorOf(`[webhooks]\nretry_delays_ms = [-1]\n`)).toContain("webhooks.retry_delays_ms");
    expect(errorOf(`[webhooks]\nattempt_timeout_ms = 600000\n`)).toContain("webhooks.attempt_timeout_ms");
    expect(errorOf(`[webhooks]\nretry = 1\n`)).toContain("webhooks.retry: unknown key");
    expect(errorOf(`[webhooks]\nrotation_overlap_s = -1\n`)).toContain("webhooks.rotation_overlap_s");
    expect(errorOf(`[webhooks]\nrotation_overlap_s = 604801\n`)).toContain("webhooks.rotation_overlap_s: Expected integer to be less or equal to 604800");
    expect(configFromToml(`[webhooks]\nrotation_overlap_s = 0\n`).webhooks.rotation_overlap_s).toBe(0);
    const defaults = configFromToml("").webhooks;
    expect(defaults).toEqual({ allow_private_addresses: false, retry_delays_ms: [...DEFAULT_RETRY_DELAYS_MS], attempt_timeout_ms: 10_000, concurrency: 8, poll_interval_ms: 1_000, rotation_overlap_s: 86_400 });
  });

  test("the key file is made 0600 on the first secret, and reused; a configured key makes none", async () => {
    const run = (toml: string) => {
      const config = configFromToml(toml);
      config.server.data_dir = tempDir("atelier-webhook-key-");
      const s = memoryStore();
      const services = createServices({ config, store: s, logger: createLogger(() => {}) });
      return { config, store: s, services };
    };
    const a = run("");
    const keyFile = join(a.config.server.data_dir, "webhook-secrets.key");
    expect(existsSync(keyFile)).toBe(false);
    const user = addUser(a.store, 0);
    const secret = await a.services.taskEvents.endpoints.rotateSecret(user);
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    expect(Buffer.from(readFileSync(keyFile, "utf8").trim(), "base64").length).toBe(32);
    // Another process on the same data directory opens it with the same key.
    const again = new SecretBox(() => loadWebhookSecretKey(a.config.server.data_dir));
    expect(again.open((await a.store.webhooks.endpoint(user))!.secret_sealed!, secretContext(user))).toBe(secret);
    await a.store.close();

    const b = run(`[webhooks]\nsecret_key = "${Buffer.alloc(32, 5).toString("base64")}"\n`);
    const other = addUser(b.store, 0);
    await b.services.taskEvents.endpoints.rotateSecret(other);
    expect(existsSync(join(b.config.server.data_dir, "webhook-secrets.key"))).toBe(false);
    expect(new SecretBox(() => Buffer.alloc(32, 5)).open((await b.store.webhooks.endpoint(other))!.secret_sealed!, secretContext(other))).toMatch(/^whsec_/);
    await b.store.close();
    rmSync(a.config.server.data_dir, { recursive: true, force: true });
    rmSync(b.config.server.data_dir, { recursive: true, force: true });
  });
});
