/**
 * Image jobs that outlive the connection, through real servers: Idempotency-Key (a retry storm
 * charges once; the openai client's own timeout retry is not charged twice; a failed request
 * may run again; a different request is refused; keys survive a restart), async tasks
 * (Prefer: respond-async, polling, listing without images, cancel with refund and without
 * waiting for other work, a proxy that times out before the image is ready, retention, keyed
 * tasks kept as long as their key), a failure between a task's claim and its engine, a cancel
 * through the instance that does not run the task, and a SIGKILL with queued tasks.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { ATELIER_FROM_SOURCE, lastLine, runAtelier, startServerProcess } from "../support/process";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";
import { ControlledEngine } from "../support/images";
import { until } from "../support/until";
import { startFakeOpenAI } from "../support/fakeUpstreams";
import { UpstreamFailed } from "../../src/core/engine";

let server: TestServer;
let engine: ControlledEngine;

beforeAll(async () => {
  engine = new ControlledEngine();
  server = await startTestServer({
    config: (c) => {
      c.server.log_requests = false;
      c.limits.queue_timeout_ms = 20_000;
      c.limits.generation_concurrency = 8;
      c.limits.per_user_concurrency = 8;
      c.limits.async_concurrency = 1;
      c.limits.async_per_user_concurrency = 1;
    },
    customize: (s) => s.engines.registerBuiltinImage(engine),
  });
});
afterAll(async () => {
  engine.releaseAll();
  await server.close();
});

const ledgerOk = async (userId: number) => expect(await server.services.store.credits.ledgerSum(userId)).toBe(await server.balance(userId));

function post(key: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(server.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

const GEN = { prompt: "a red fox", size: "64x64" };

describe("Idempotency-Key", () => {
  test("a retry storm with one key: every answer is the same image, one credit charged", async () => {
    const { key, userId } = await server.userWithKey({ credits: 5 });
    engine.hold("succeed");
    const storm = Array.from({ length: 8 }, () => post(key, "/v1/images/generations", GEN, { "idempotency-key": "storm-1" }));
    await until(() => engine.waiting >= 1, "the first request to reach the engine");
    await Bun.sleep(200);
    expect(engine.waiting).toBe(1);
    engine.releaseAll();
    const answers = await Promise.all(storm);
    const bodies = await Promise.all(answers.map((r) => r.json()));
    for (const r of answers) expect(r.status).toBe(200);
    expect(new Set(bodies.map((b) => b.data[0].b64_json)).size).toBe(1);
    expect(answers.filter((r) => r.headers.get("idempotent-replayed") === "true")).toHaveLength(7);
    expect(await server.balance(userId)).toBe(4);
    await ledgerOk(userId);
    engine.behave = async (job) => engine.png(job);
  });

  test("the openai client's own retry after its timeout is answered by the first request, not charged again", async () => {
    const { key, userId } = await server.userWithKey({ credits: 5 });
    // The first attempt times out; a retry (same headers, so the same key) waits for the first
    // request's answer. (openai-node sends no Idempotency-Key by itself: it is passed as a header.)
    const client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, timeout: 500, maxRetries: 5 });
    let calls = 0;
    engine.behave = async (job) => {
      calls++;
      await Bun.sleep(700);
      return engine.png(job);
    };
    const image = await client.images.generate({ model: "builtin-image", prompt: "a slow fox", size: "64x64" as never }, { headers: { "Idempotency-Key": "client-retry-1" } });
    expect(image.data?.[0]?.b64_json?.length).toBeGreaterThan(0);
    expect(calls).toBe(1);
    expect(await server.balance(userId)).toBe(4);
    engine.behave = async (job) => engine.png(job);
  });

  test("the same key with a different request is 400 idempotency_key_reused naming the key, nothing charged", async () => {
    const { key, userId } = await server.userWithKey({ credits: 5 });
    expect((await post(key, "/v1/images/generations", GEN, { "idempotency-key": "reuse-1" })).status).toBe(200);
    const res = await post(key, "/v1/images/generations", { ...GEN, prompt: "a blue fox" }, { "idempotency-key": "reuse-1" });
    expect(res.status).toBe(400);
    const err = (await res.json()).error;
    expect(err.code).toBe("idempotency_key_reused");
    expect(err.message).toContain("reuse-1");
    expect(await server.balance(userId)).toBe(4);
  });

  test("keys are per user: another user's same key runs its own request", async () => {
    const a = await server.userWithKey({ credits: 2 });
    const b = await server.userWithKey({ credits: 2 });
    expect((await post(a.key, "/v1/images/generations", GEN, { "idempotency-key": "shared-name" })).status).toBe(200);
    const res = await post(b.key, "/v1/images/generations", GEN, { "idempotency-key": "shared-name" });
    expect(res.status).toBe(200);
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    expect(await server.balance(b.userId)).toBe(1);
  });

  test("a request that failed and was refunded runs again under its key", async () => {
    const { key, userId } = await server.userWithKey({ credits: 3 });
    engine.behave = async () => {
      throw new UpstreamFailed("the first try fails");
    };
    expect((await post(key, "/v1/images/generations", GEN, { "idempotency-key": "fail-then-ok" })).status).toBe(502);
    expect(await server.balance(userId)).toBe(3);
    engine.behave = async (job) => engine.png(job);
    const again = await post(key, "/v1/images/generations", GEN, { "idempotency-key": "fail-then-ok" });
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBeNull();
    expect(await server.balance(userId)).toBe(2);
    await ledgerOk(userId);
  });

  test("duplicates that waited on a first request that failed: one runs, the rest replay its image, none answers 5xx, one credit", async () => {
    // A store whose balance read takes 50 ms (as a networked PostgreSQL's round trips can): the
    // duplicates all wake when the first fails, and all but one lose the race for the key.
    const held = new ControlledEngine();
    const slow = await startTestServer({
      config: (c) => {
        c.server.log_requests = false;
        c.limits.queue_timeout_ms = 20_000;
        c.limits.generation_concurrency = 16;
        c.limits.per_user_concurrency = 16;
      },
      customize: (s) => {
        s.engines.registerBuiltinImage(held);
        const credits = s.store.credits;
        const balance = credits.balance.bind(credits);
        credits.balance = async (id: number) => {
          await Bun.sleep(50);
          return balance(id);
        };
      },
    });
    try {
      const { key, userId } = await slow.userWithKey({ credits: 50 });
      const send = () =>
        fetch(slow.url + "/v1/images/generations", {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": "dups" },
          body: JSON.stringify(GEN),
        });
      held.hold("fail");
      const first = send();
      await until(() => held.waiting >= 1, "the first request at the engine");
      const duplicates = Array.from({ length: 6 }, send);
      await until(async () => (await slow.services.store.tasks.idempotency(userId, "dups", Date.now())) !== null, "the key claimed");
      await Bun.sleep(300); // the duplicates are waiting on the first (they look every 100 ms)
      held.behave = async (job) => {
        await Bun.sleep(300);
        return held.png(job);
      };
      held.releaseAll();
      expect((await first).status).toBe(502);
      const answers = await Promise.all(duplicates);
      const bodies = await Promise.all(answers.map((r) => r.json() as Promise<{ data?: { b64_json: string }[] }>));
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
      expect(answers.filter((r) => r.headers.get("idempotent-replayed") === "true")).toHaveLength(5);
      expect(new Set(bodies.map((b) => b.data?.[0]?.b64_json)).size).toBe(1);
      expect(await slow.balance(userId)).toBe(49);
      expect(await slow.services.store.credits.ledgerSum(userId)).toBe(49);
    } finally {
      held.releaseAll();
      await slow.close();
    }
  });

  test("multipart edits are fingerprinted by their files: the same upload replays, another file is a different request", async () => {
    const { key, userId } = await server.userWithKey({ credits: 5 });
    const { makePng } = await import("../support/images");
    const form = (color: number) => {
      const f = new FormData();
      f.append("image", new File([makePng(32, 32, () => [color, 0, 0, 255])], "a.png", { type: "image/png" }));
      f.append("prompt", "make it blue");
      f.append("size", "64x64");
      return f;
    };
    const send = (color: number) => fetch(`${server.url}/v1/images/edits`, { method: "POST", headers: { authorization: `Bearer ${key}`, "idempotency-key": "edit-1" }, body: form(color) });
    expect((await send(10)).status).toBe(200);
    const replay = await send(10);
    expect(replay.status).toBe(200);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect((await send(200)).status).toBe(400);
    expect(await server.balance(userId)).toBe(4);
  });

  test("keys and their answers are durable: after a restart on the same data the repeat is replayed, not charged", async () => {
    const dataDir = tempDir("atelier-idem-");
    const first = await startTestServer({ config: (c) => void (c.server.data_dir = dataDir) });
    const { key, userId } = await first.userWithKey({ credits: 3 });
    const original = await (await fetch(`${first.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": "durable-1" }, body: JSON.stringify(GEN) })).json();
    await first.stop();
    const second = await startTestServer({ config: (c) => void (c.server.data_dir = dataDir) });
    try {
      const res = await fetch(`${second.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": "durable-1" }, body: JSON.stringify(GEN) });
      expect(res.status).toBe(200);
      expect(res.headers.get("idempotent-replayed")).toBe("true");
      expect((await res.json()).data[0].b64_json).toBe(original.data[0].b64_json);
      expect(await second.balance(userId)).toBe(2);
    } finally {
      await second.close();
    }
  });

  test("a malformed key is 400 invalid_idempotency_key", async () => {
    const { key } = await server.userWithKey({ credits: 1 });
    const res = await post(key, "/v1/images/generations", GEN, { "idempotency-key": "x".repeat(256) });
    expect(res.status).toBe(400);
    expect((await res.json()).error.code).toBe("invalid_idempotency_key");
  });
});

describe("async tasks", () => {
  const ASYNC = { prefer: "respond-async" };

  async function waitForTask(key: string, id: string, done = (t: { status: string }) => ["succeeded", "failed", "canceled"].includes(t.status)) {
    for (let i = 0; i < 200; i++) {
      const t = await (await fetch(`${server.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).json();
      if (done(t)) return t;
      await Bun.sleep(25);
    }
    throw new Error("task did not finish");
  }

  test("Prefer: respond-async answers 202 with Location and the task; the result is the synchronous body; charged once", async () => {
    const { key, userId } = await server.userWithKey({ credits: 3 });
    const res = await post(key, "/v1/images/generations", GEN, ASYNC);
    expect(res.status).toBe(202);
    const task = await res.json();
    expect(res.headers.get("location")).toBe(`/v1/images/tasks/${task.id}`);
    expect(res.headers.get("preference-applied")).toBe("respond-async");
    expect(res.headers.get("x-request-id")).toBe(task.id);
    expect(task).toMatchObject({ object: "image.task", model: "builtin-image", endpoint: "generations" });
    expect(["queued", "running", "succeeded"]).toContain(task.status);
    expect(await server.balance(userId)).toBe(2);
    const done = await waitForTask(key, task.id);
    expect(done.status).toBe("succeeded");
    expect(Object.keys(done.result).sort()).toEqual(["created", "data", "generation_time_ms", "id", "image_id", "output_format", "quality", "size"]);
    expect(done.result.id).toBe(task.id);
    expect(done.result.size).toBe("64x64");
    expect(done.started_at).toBeGreaterThanOrEqual(done.created_at);
    expect(await server.services.store.requests.get(task.id)).toMatchObject({ status: "succeeded", credits_charged: 1 });
    // The task row names the kept image; the bytes live once, in the image store.
    const row = (await server.services.store.tasks.get(task.id))!;
    expect(row.result).not.toContain(done.result.data[0].b64_json);
    expect(JSON.parse(row.result!).image_id).toBe(done.result.image_id);
    await ledgerOk(userId);
  });

  test("the official openai client submits a task with Prefer and reads it back", async () => {
    const { key } = await server.userWithKey({ credits: 2 });
    const client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1` });
    const task = await client.post<{ id: string; object: string }>("/images/generations", { body: { prompt: "a fox", size: "64x64" }, headers: { Prefer: "respond-async" } });
    expect(task.object).toBe("image.task");
    let read = await client.get<{ status: string; result?: { data: { b64_json: string }[] } }>(`/images/tasks/${task.id}`);
    for (let i = 0; i < 100 && read.status !== "succeeded"; i++) {
      await Bun.sleep(25);
      read = await client.get(`/images/tasks/${task.id}`);
    }
    expect(read.result!.data[0]!.b64_json.length).toBeGreaterThan(0);
  });

  test("queue positions, listing newest first with a cursor, and someone else's task is 404", async () => {
    const { key, userId } = await server.userWithKey({ credits: 5 });
    engine.hold("succeed");
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await (await post(key, "/v1/images/generations", GEN, ASYNC)).json()).id);
    await until(() => engine.waiting === 1, "the first task to run");
    const second = await (await fetch(`${server.url}/v1/images/tasks/${ids[1]}`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(second).toMatchObject({ status: "queued", queue_position: 1 });
    const third = await (await fetch(`${server.url}/v1/images/tasks/${ids[2]}`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(third.queue_position).toBe(2);
    const page1 = await (await fetch(`${server.url}/v1/images/tasks?limit=2`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(page1.data.map((t: { id: string }) => t.id)).toEqual([ids[2], ids[1]]);
    expect(page1.has_more).toBe(true);
    const page2 = await (await fetch(`${server.url}/v1/images/tasks?limit=2&after=${ids[1]}`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(page2.data.map((t: { id: string }) => t.id)).toEqual([ids[0]]);
    const other = await server.userWithKey();
    const foreign = await fetch(`${server.url}/v1/images/tasks/${ids[0]}`, { headers: { authorization: `Bearer ${other.key}` } });
    expect(foreign.status).toBe(404);
    while (engine.waiting > 0 || (await server.services.store.tasks.queued()).length > 0) {
      engine.releaseAll();
      await Bun.sleep(20);
    }
    for (const id of ids) expect((await waitForTask(key, id)).status).toBe("succeeded");
    engine.behave = async (job) => engine.png(job);
    expect(await server.balance(userId)).toBe(2);
  });

  test("the list carries no images (GET of one task has it): listing a page of finished tasks reads no image", async () => {
    const { key } = await server.userWithKey({ credits: 5 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await (await post(key, "/v1/images/generations", GEN, ASYNC)).json()).id);
    for (const id of ids) await waitForTask(key, id);
    const images = server.services.images;
    const open = images.open.bind(images);
    let reads = 0;
    images.open = (id) => (reads++, open(id));
    try {
      const client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1` });
      type Listed = { data: { id: string; status: string; result?: { image_id?: string; data: { b64_json?: string; url?: string; revised_prompt: string }[] } }[] };
      const list = await client.get<Listed>("/images/tasks", { query: { limit: 100 } });
      expect(reads).toBe(0);
      expect(list.data.map((t) => t.id)).toEqual([...ids].reverse());
      for (const t of list.data) {
        expect(t.status).toBe("succeeded");
        expect(t.result!.data).toEqual([{ revised_prompt: GEN.prompt }]);
        expect(t.result!.image_id).toMatch(/^img_/);
      }
      const one = await client.get<{ result: { image_id: string; data: { b64_json: string }[] } }>(`/images/tasks/${ids[0]}`);
      expect(one.result.image_id).toBe(list.data[2]!.result!.image_id!);
      expect(one.result.data[0]!.b64_json.length).toBeGreaterThan(0);
      expect(reads).toBe(1);
    } finally {
      images.open = open;
    }
  });

  test("cancel: a queued task is refunded at once, a running one is aborted and refunded, an ended one is 409", async () => {
    const { key, userId } = await server.userWithKey({ credits: 5 });
    engine.behave = (job) => new Promise((_, reject) => job.signal.addEventListener("abort", () => reject(new UpstreamFailed("aborted"))));
    const running = (await (await post(key, "/v1/images/generations", GEN, ASYNC)).json()).id;
    const queued = (await (await post(key, "/v1/images/generations", GEN, ASYNC)).json()).id;
    await until(async () => engine.calls.some(() => true) && (await server.services.store.tasks.get(running))?.status === "running", "the first task to run");
    expect(await server.balance(userId)).toBe(3);
    const cancelQueued = await post(key, `/v1/images/tasks/${queued}/cancel`, {});
    expect(cancelQueued.status).toBe(200);
    expect(await cancelQueued.json()).toMatchObject({ status: "canceled", error: { code: "task_canceled" } });
    expect(await server.balance(userId)).toBe(4);
    const cancelRunning = await post(key, `/v1/images/tasks/${running}/cancel`, {});
    expect(cancelRunning.status).toBe(200);
    expect((await cancelRunning.json()).status).toBe("canceled");
    expect(await server.balance(userId)).toBe(5);
    const again = await post(key, `/v1/images/tasks/${running}/cancel`, {});
    expect(again.status).toBe(409);
    expect((await again.json()).error.code).toBe("task_not_cancelable");
    await ledgerOk(userId);
    engine.behave = async (job) => engine.png(job);
  });

  test("canceling a running task waits for that task only, not for another user's generation", async () => {
    const other = await server.userWithKey({ credits: 2 });
    const me = await server.userWithKey({ credits: 2 });
    let releaseOther!: () => void;
    engine.behave = (job) =>
      new Promise((resolve, reject) => {
        if (job.prompt === "someone else's slow image") releaseOther = () => resolve(engine.png(job));
        else job.signal.addEventListener("abort", () => reject(new UpstreamFailed("aborted")), { once: true });
      });
    const otherRequest = post(other.key, "/v1/images/generations", { ...GEN, prompt: "someone else's slow image" });
    await until(() => releaseOther !== undefined, "the other user's generation at the engine");
    const { id } = await (await post(me.key, "/v1/images/generations", GEN, ASYNC)).json();
    await until(async () => (await server.services.store.tasks.get(id))?.status === "running", "my task to run");
    const cancel = post(me.key, `/v1/images/tasks/${id}/cancel`, {});
    // The other generation is held until after the answer: any answer at all shows the cancel did not wait for it.
    const answered = await Promise.race([cancel.then(() => true), Bun.sleep(10_000).then(() => false)]);
    releaseOther();
    expect((await otherRequest).status).toBe(200);
    expect(answered).toBe(true);
    expect(await (await cancel).json()).toMatchObject({ id, status: "canceled", error: { code: "task_canceled" } });
    expect(await server.balance(me.userId)).toBe(2);
    await ledgerOk(me.userId);
    engine.behave = async (job) => engine.png(job);
  });

  test("an async request with a key returns the same task on a repeat", async () => {
    const { key, userId } = await server.userWithKey({ credits: 3 });
    const first = await (await post(key, "/v1/images/generations", GEN, { ...ASYNC, "idempotency-key": "async-1" })).json();
    const res = await post(key, "/v1/images/generations", GEN, { ...ASYNC, "idempotency-key": "async-1" });
    expect(res.status).toBe(202);
    expect(res.headers.get("idempotent-replayed")).toBe("true");
    expect((await res.json()).id).toBe(first.id);
    await waitForTask(key, first.id);
    expect(await server.balance(userId)).toBe(2);
  });

  test("a proxy that gives up after 1 s in front of a 3 s generation: the async task still delivers the image", async () => {
    const { key, userId } = await server.userWithKey({ credits: 3 });
    engine.behave = async (job) => {
      await Bun.sleep(3000);
      return engine.png(job);
    };
    const proxy = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        const url = new URL(req.url);
        try {
          return await fetch(server.url + url.pathname + url.search, { method: req.method, headers: req.headers, body: req.body, signal: AbortSignal.timeout(1000) });
        } catch {
          return new Response("upstream timed out", { status: 524 });
        }
      },
    });
    try {
      const direct = await fetch(`http://127.0.0.1:${proxy.port}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(GEN) });
      expect(direct.status).toBe(524);
      const accepted = await fetch(`http://127.0.0.1:${proxy.port}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" }, body: JSON.stringify(GEN) });
      expect(accepted.status).toBe(202);
      const { id } = await accepted.json();
      let task: { status: string; result?: { data: { b64_json: string }[] } } = { status: "queued" };
      for (let i = 0; i < 100 && task.status !== "succeeded"; i++) {
        await Bun.sleep(100);
        task = await (await fetch(`http://127.0.0.1:${proxy.port}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).json();
      }
      expect(task.status).toBe("succeeded");
      expect(task.result!.data[0]!.b64_json.length).toBeGreaterThan(0);
    } finally {
      proxy.stop(true);
      engine.behave = async (job) => engine.png(job);
    }
    // The synchronous request the proxy cut off still ran to the end and was charged; the async one too.
    await until(async () => (await server.balance(userId)) === 1, "both generations to be charged");
    await ledgerOk(userId);
  });

  test("a stream the client drops: the generation finishes and its result is kept with the task", async () => {
    const { key, userId } = await server.userWithKey({ credits: 2 });
    engine.behave = async (job) => {
      await Bun.sleep(300);
      return engine.png(job);
    };
    const client = new AbortController();
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...GEN, stream: true, partial_images: 1 }),
      signal: client.signal,
    });
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const id = res.headers.get("x-request-id")!;
    client.abort();
    const done = await waitForTask(key, id);
    engine.behave = async (job) => engine.png(job);
    expect(done).toMatchObject({ status: "succeeded", endpoint: "generations" });
    expect(done.result.data[0].b64_json.length).toBeGreaterThan(0);
    expect(await server.balance(userId)).toBe(1);
  });

  test("a running stream's progress shows on its task (what a reattaching page polls)", async () => {
    const { key } = await server.userWithKey({ credits: 2 });
    let release!: () => void;
    engine.behave = (job) =>
      new Promise((resolve) => {
        job.onProgress?.({ fraction: 0.5 });
        release = () => resolve(engine.png(job));
      });
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...GEN, stream: true, partial_images: 0 }),
    });
    const id = res.headers.get("x-request-id")!;
    await until(() => release !== undefined, "the engine to start");
    const running = await (await fetch(`${server.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(running).toMatchObject({ status: "running", progress: 0.5 });
    release();
    await res.text();
    engine.behave = async (job) => engine.png(job);
  });

  test("a finished task is readable until its retention ends, then 404 task_expired", async () => {
    const { key } = await server.userWithKey({ credits: 2 });
    const { id } = await (await post(key, "/v1/images/generations", GEN, ASYNC)).json();
    await waitForTask(key, id);
    await server.services.store.tasks.expire(Date.now() + 25 * 3_600_000);
    const res = await fetch(`${server.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(404);
    expect((await res.json()).error.code).toBe("task_expired");
  });

  test("a full async queue for the user is 429 task_queue_full and nothing is charged", async () => {
    const { key, userId } = await server.userWithKey({ credits: 40 });
    engine.hold("succeed");
    const statuses: number[] = [];
    for (let i = 0; i < 21; i++) statuses.push((await post(key, "/v1/images/generations", GEN, ASYNC)).status);
    expect(statuses.slice(0, 20).every((s) => s === 202)).toBe(true);
    expect(statuses[20]).toBe(429);
    expect(await server.balance(userId)).toBe(20);
    while ((await server.services.store.tasks.queued()).length > 0 || engine.waiting > 0) {
      engine.releaseAll();
      await Bun.sleep(20);
    }
    engine.behave = async (job) => engine.png(job);
  });
});

describe("an engine that ignores its signal past the deadline", () => {
  test("the async slot stays taken until it stops: the next task waits instead of running beside it", async () => {
    const stubborn = new ControlledEngine();
    const slow = await startTestServer({
      config: (c) => {
        c.server.log_requests = false;
        c.limits.generation_timeout_ms = 200;
        c.limits.async_concurrency = 1;
        c.limits.async_per_user_concurrency = 1;
      },
      customize: (s) => s.engines.registerBuiltinImage(stubborn),
    });
    try {
      const { key, userId } = await slow.userWithKey({ credits: 5 });
      const submit = () =>
        fetch(slow.url + "/v1/images/generations", {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" },
          body: JSON.stringify(GEN),
        }).then((r) => r.json() as Promise<{ id: string }>);
      const status = async (id: string) =>
        ((await (await fetch(`${slow.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).json()) as { status: string }).status;
      stubborn.hold(); // never looks at its signal
      const first = await submit();
      await until(() => stubborn.waiting === 1, "the first task's engine");
      await until(async () => (await status(first.id)) === "failed", "the first task past its deadline (refunded)");
      const second = await submit();
      await Bun.sleep(300);
      // The first engine still runs: the second task is queued, not started.
      expect(stubborn.calls).toHaveLength(1);
      expect(await status(second.id)).toBe("queued");
      stubborn.behave = async (job) => stubborn.png(job);
      stubborn.releaseAll();
      await until(async () => (await status(second.id)) === "succeeded", "the second task once the first engine stopped");
      expect(stubborn.calls).toHaveLength(2);
      expect(await slow.balance(userId)).toBe(4);
    } finally {
      stubborn.releaseAll();
      await slow.close();
    }
  });
});

describe("a server killed with async tasks queued", () => {
  test("queued tasks run after the restart, the running one is refunded once as interrupted", async () => {
    const upstream = startFakeOpenAI();
    upstream.setLatency(60_000);
    const dataDir = tempDir("atelier-kill-");
    const config = `${dataDir}/atelier.toml`;
    await Bun.write(
      config,
      `[server]\nlog_requests = false\n[limits]\nasync_concurrency = 1\n\n[[upstreams]]\nid = "slow"\nkind = "openai"\nbase_url = "${upstream.url}/v1"\n[[upstreams.accounts]]\nid = "a"\napi_key = "sk-test-slow"\n\n[[models]]\nid = "slow-image"\nkind = "image"\nupstream = "slow"\n`,
    );
    const env = { ATELIER_DATA: dataDir, ATELIER_CONFIG: config };
    expect((await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "kill@example.com", "--credits", "10"], { env })).code).toBe(0);
    const key = lastLine((await runAtelier(ATELIER_FROM_SOURCE, ["key", "create", "kill@example.com", "--name", "k"], { env })).stdout);
    const first = await startServerProcess(ATELIER_FROM_SOURCE, ["--port", "0", "--host", "127.0.0.1"], { env });
    const submit = async (url: string) =>
      (await (await fetch(`${url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" }, body: JSON.stringify({ model: "slow-image", prompt: "x", size: "64x64" }) })).json()).id as string;
    const ids = [await submit(first.url), await submit(first.url), await submit(first.url)];
    await until(() => upstream.received.length === 1, "the first task to reach the upstream", 10_000);
    first.proc.kill("SIGKILL");
    await first.proc.exited;
    upstream.setLatency(0);
    const second = await startServerProcess(ATELIER_FROM_SOURCE, ["--port", "0", "--host", "127.0.0.1"], { env });
    try {
      const status = async (id: string) => (await (await fetch(`${second.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).json()) as { status: string; error?: { code: string } };
      for (let i = 0; i < 200; i++) {
        const all = await Promise.all(ids.map(status));
        if (all.every((t) => t.status !== "queued" && t.status !== "running")) break;
        await Bun.sleep(50);
      }
      const [killed, a, b] = await Promise.all(ids.map(status));
      expect(killed).toMatchObject({ status: "failed", error: { code: "interrupted" } });
      expect(a!.status).toBe("succeeded");
      expect(b!.status).toBe("succeeded");
    } finally {
      await second.stop();
      await upstream.stop();
    }
    // 10 credits, 3 charged, the interrupted one refunded once: 8.
    const list = await runAtelier(ATELIER_FROM_SOURCE, ["user", "list"], { env });
    expect(list.stdout).toMatch(/kill@example\.com\S*\s.*\b8\b/);
  }, 60_000);
});

describe("an async task whose run fails after its claim, before its engine", () => {
  let failing: TestServer;
  let failInputs = false;
  beforeAll(async () => {
    failing = await startTestServer({
      config: (c) => void (c.server.log_requests = false),
      customize: (s) => {
        // The store drops its connection while the runner reads the task's inputs.
        const tasks = s.store.tasks;
        const inputs = tasks.inputs.bind(tasks);
        tasks.inputs = async (id) => {
          if (!failInputs) return inputs(id);
          failInputs = false;
          throw Object.assign(new Error("Connection closed"), { code: "ERR_POSTGRES_CONNECTION_CLOSED" });
        };
      },
    });
  });
  afterAll(async () => {
    await failing.close();
  });

  test("fails and is refunded once, and the cause is logged", async () => {
    const { key, userId } = await failing.userWithKey({ credits: 5 });
    failInputs = true;
    const res = await fetch(`${failing.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" },
      body: JSON.stringify(GEN),
    });
    expect(res.status).toBe(202);
    const { id } = await res.json();
    await until(async () => ["succeeded", "failed", "canceled"].includes((await failing.services.store.tasks.get(id))!.status), "the task to end", 5000);
    const task = await (await fetch(`${failing.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(task).toMatchObject({ status: "failed", error: { type: "server_error", code: "database_unavailable" } });
    expect(await failing.services.store.requests.get(id)).toMatchObject({ status: "failed", credits_charged: 1, credits_refunded: 1 });
    expect(await failing.balance(userId)).toBe(5);
    expect(await failing.services.store.credits.ledgerSum(userId)).toBe(5);
    expect((await failing.services.store.credits.ledger(userId)).filter((r) => r.kind === "refund")).toHaveLength(1);
    await until(() => failing.logs.some((l) => l.includes(id) && l.includes("Connection closed")), "the cause in the log", 2000);
  });
});

describe("keyed tasks with a retention shorter than their key's 24 h", () => {
  let short: TestServer;
  let offset = 0;
  const clock = () => Date.now() + offset;
  beforeAll(async () => {
    short = await startTestServer({
      config: (c) => {
        c.server.log_requests = false;
        c.tasks.retention_hours = 1;
      },
      clock,
    });
  });
  afterAll(async () => {
    await short.close();
  });

  const submit = (key: string, idempotencyKey: string) =>
    fetch(`${short.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": idempotencyKey, prefer: "respond-async" },
      body: JSON.stringify(GEN),
    });

  test("lives as long as its key: a replay 2 h later still finds its result; after the key, task_expired", async () => {
    offset = 0;
    const { key, userId } = await short.userWithKey({ credits: 5 });
    const first = await (await submit(key, "async-kept")).json();
    await until(async () => (await short.services.store.tasks.get(first.id))?.status === "succeeded", "the task to succeed");
    offset = 2 * 3_600_000;
    await short.services.store.tasks.expire(clock());
    const again = await submit(key, "async-kept");
    expect(again.status).toBe(202);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    const replayed = await again.json();
    expect(replayed).toMatchObject({ id: first.id, status: "succeeded" });
    expect(replayed.result.data[0].b64_json.length).toBeGreaterThan(0);
    const read = await fetch(`${short.url}/v1/images/tasks/${first.id}`, { headers: { authorization: `Bearer ${key}` } });
    expect(read.status).toBe(200);
    expect(await short.balance(userId)).toBe(4);
    // Once the key has expired the task goes with it.
    offset = 25 * 3_600_000;
    await short.services.store.tasks.expire(clock());
    const gone = await fetch(`${short.url}/v1/images/tasks/${first.id}`, { headers: { authorization: `Bearer ${key}` } });
    expect(gone.status).toBe(404);
    expect((await gone.json()).error.code).toBe("task_expired");
  });

  test("a keyed synchronous request too: its replay 2 h later is the same image, not charged again", async () => {
    offset = 0;
    const { key, userId } = await short.userWithKey({ credits: 5 });
    const sync = (k: string) =>
      fetch(`${short.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "idempotency-key": k }, body: JSON.stringify(GEN) });
    const first = await sync("sync-kept");
    expect(first.status).toBe(200);
    const image = (await first.json()).data[0].b64_json;
    offset = 2 * 3_600_000;
    await short.services.store.tasks.expire(clock());
    const again = await sync("sync-kept");
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect((await again.json()).data[0].b64_json).toBe(image);
    expect(await short.balance(userId)).toBe(4);
  });

  test("a keyed task canceled while queued is kept as long as its key too; an unkeyed one, the configured hour", async () => {
    offset = 0;
    const { key } = await short.userWithKey({ credits: 5 });
    // Canceled before it can run: a queued task is refunded at once (the runner is stopped so that it stays queued).
    short.services.tasks.stop();
    try {
      const keyed = await (await submit(key, "async-canceled")).json();
      const plain = await (
        await fetch(`${short.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" }, body: JSON.stringify(GEN) })
      ).json();
      for (const id of [keyed.id, plain.id]) expect((await (await fetch(`${short.url}/v1/images/tasks/${id}/cancel`, { method: "POST", headers: { authorization: `Bearer ${key}` } })).json()).status).toBe("canceled");
      offset = 2 * 3_600_000;
      await short.services.store.tasks.expire(clock());
      const status = async (id: string) => (await fetch(`${short.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).status;
      expect(await status(keyed.id)).toBe(200);
      expect(await status(plain.id)).toBe(404);
    } finally {
      short.services.tasks.start();
    }
  });
});

describe("two instances on one database: a cancel sent to the one that does not run the task, one user's tasks on both", () => {
  let a: TestServer;
  let b: TestServer;
  const engineA = new ControlledEngine();
  const engineB = new ControlledEngine();
  beforeAll(async () => {
    // One data_dir: one SQLite file on the embedded pass, one PostgreSQL database on the scaled one.
    const dir = tempDir("atelier-two-");
    a = await startTestServer({ config: (c) => ((c.server.data_dir = dir), (c.server.log_requests = false)), customize: (s) => s.engines.registerBuiltinImage(engineA) });
    b = await startTestServer({ config: (c) => ((c.server.data_dir = dir), (c.server.log_requests = false)), customize: (s) => s.engines.registerBuiltinImage(engineB) });
  }, 60_000);
  afterAll(async () => {
    engineA.releaseAll();
    await b?.close();
    await a?.close();
  });

  const submitTo = async (server: TestServer, key: string) =>
    (await (await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" }, body: JSON.stringify(GEN) })).json()).id as string;
  const cancelAt = (server: TestServer, key: string, id: string) => fetch(`${server.url}/v1/images/tasks/${id}/cancel`, { method: "POST", headers: { authorization: `Bearer ${key}` } });
  const refunds = async (server: TestServer, userId: number, id: string) => (await server.services.store.credits.ledger(userId)).filter((r) => r.kind === "refund" && r.request_id === id).length;

  test("the owner aborts it within moments: the answer is the canceled task, refunded once, never charged", async () => {
    const { key, userId } = await a.userWithKey({ credits: 5 });
    let aborted = false;
    engineA.behave = (job) =>
      new Promise((_, reject) =>
        job.signal.addEventListener("abort", () => ((aborted = true), reject(new UpstreamFailed("aborted"))), { once: true }),
      );
    const id = await submitTo(a, key);
    await until(() => engineA.calls.length === 1, "the task to run on the instance it was sent to");
    const res = await cancelAt(b, key, id);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id, status: "canceled", error: { code: "task_canceled" }, cancel_requested_at: expect.any(Number) });
    expect(aborted).toBe(true);
    expect(engineB.calls).toHaveLength(0);
    expect(await a.balance(userId)).toBe(5);
    expect(await refunds(a, userId, id)).toBe(1);
    expect(await a.services.store.credits.ledgerSum(userId)).toBe(5);
  });

  test("an owner whose engine does not stop at once: the answer says so (running, cancel_requested_at), and the task ends canceled and refunded", async () => {
    const { key, userId } = await a.userWithKey({ credits: 5 });
    engineA.hold("succeed"); // ignores its abort signal
    const id = await submitTo(a, key);
    await until(() => engineA.waiting === 1, "the task to run on the instance it was sent to");
    const res = await cancelAt(b, key, id);
    expect(res.status).toBe(200);
    const answer = await res.json();
    // (Not expect.any(Number) inside toMatchObject: Bun 1.4 then replaces the value with the matcher.)
    expect(answer).toMatchObject({ id, status: "running" });
    expect(answer.cancel_requested_at).toBeGreaterThanOrEqual(answer.created_at);
    // The image the engine finishes after the cancel is not delivered, nor charged.
    engineA.releaseAll();
    await until(async () => (await a.services.store.tasks.get(id))!.status !== "running", "the task to end", 10_000);
    const read = await (await fetch(`${b.url}/v1/images/tasks/${id}`, { headers: { authorization: `Bearer ${key}` } })).json();
    expect(read).toMatchObject({ status: "canceled", error: { code: "task_canceled" } });
    expect(read.result).toBeUndefined();
    expect(await a.balance(userId)).toBe(5);
    expect(await refunds(a, userId, id)).toBe(1);
    // Ended: a second cancel is 409, on either instance.
    for (const server of [a, b]) expect((await cancelAt(server, key, id)).status).toBe(409);
    engineA.behave = async (job) => engineA.png(job);
  }, 30_000);

  test("one user's async tasks sent to both instances run one at a time (async_per_user_concurrency = 1 holds across the deployment)", async () => {
    const { key, userId } = await a.userWithKey({ credits: 5 });
    engineA.hold("succeed");
    engineB.hold("succeed");
    const callsOnB = engineB.calls.length;
    const first = await submitTo(a, key);
    await until(() => engineA.waiting === 1, "the first task to run on the instance it was sent to");
    // b's answer comes after its own pass: it found the user at the limit on a, and left the task queued.
    const second = await submitTo(b, key);
    expect(engineB.calls).toHaveLength(callsOnB);
    expect(await b.services.store.tasks.get(second)).toMatchObject({ status: "queued" });
    // When the first ends, the second starts: on a (its pass after the first), or on b (its
    // once-a-second look on PostgreSQL), whichever comes first; on one of them only.
    engineA.releaseAll();
    await until(() => engineA.waiting + engineB.waiting === 1, "the second task to start once the first ended");
    expect(await a.services.store.tasks.get(first)).toMatchObject({ status: "succeeded" });
    expect(await a.services.store.tasks.get(second)).toMatchObject({ status: "running" });
    engineA.releaseAll();
    engineB.releaseAll();
    await until(async () => (await a.services.store.tasks.get(second))!.status === "succeeded", "the second task to end");
    expect(await a.balance(userId)).toBe(3);
    engineA.behave = async (job) => engineA.png(job);
    engineB.behave = async (job) => engineB.png(job);
  }, 30_000);
});

describe("a pass whose claim of a task fails because the task ended meanwhile", () => {
  let server: TestServer;
  let victim: string | undefined;
  beforeAll(async () => {
    server = await startTestServer({
      config: (c) => ((c.server.log_requests = false), (c.limits.async_per_user_concurrency = 2)),
      customize: (s) => {
        const tasks = s.store.tasks;
        const start = tasks.start.bind(tasks);
        // The victim is canceled (refunded) by someone else just as this pass claims it.
        tasks.start = async (id, now, userId, limit) => {
          if (id !== victim) return start(id, now, userId, limit);
          const canceled = { status: "failed" as const, errorCode: "task_canceled", errorMessage: "canceled", task: { status: "canceled" as const, error: { message: "canceled", type: "invalid_request_error", param: null, code: "task_canceled" }, expiresAt: now + 3_600_000 } };
          await s.store.credits.refundOnce(id, canceled, now);
          return false;
        };
      },
    });
  });
  afterAll(() => server.close());

  test("goes on with that user's next task in the same pass (on SQLite nothing else would try it before the next event)", async () => {
    const { key } = await server.userWithKey({ credits: 5 });
    server.services.tasks.stop();
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" }, body: JSON.stringify(GEN) });
      ids.push(((await res.json()) as { id: string }).id);
    }
    victim = ids[0];
    for (const id of ids) expect(await server.services.store.tasks.get(id)).toMatchObject({ status: "queued" });
    server.services.tasks.start();
    await until(async () => (await server.services.store.tasks.get(ids[1]!))?.status === "succeeded", "the user's next task to run", 5_000);
    expect(await server.services.store.tasks.get(ids[0]!)).toMatchObject({ status: "canceled" });
  });
});

describe("a pass that fails (the store busy or out of reach)", () => {
  let server: TestServer;
  let failures = 0;
  beforeAll(async () => {
    server = await startTestServer({
      config: (c) => (c.server.log_requests = false),
      customize: (s) => {
        const tasks = s.store.tasks;
        const queued = tasks.queued.bind(tasks);
        tasks.queued = async () => {
          if (failures > 0) {
            failures--;
            throw new Error("database is locked");
          }
          return queued();
        };
      },
    });
  });
  afterAll(() => server.close());

  test("is tried again shortly: a task submitted then still runs, with no other event to start it", async () => {
    const { key } = await server.userWithKey({ credits: 5 });
    failures = 1;
    const res = await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", prefer: "respond-async" }, body: JSON.stringify(GEN) });
    const { id, status } = (await res.json()) as { id: string; status: string };
    expect(status).toBe("queued");
    expect(failures).toBe(0);
    await until(async () => (await server.services.store.tasks.get(id))?.status === "succeeded", "the task to run after the failed pass", 5_000);
    expect(server.logs.some((l) => l.includes("could not start queued tasks; trying again shortly"))).toBe(true);
  });
});
