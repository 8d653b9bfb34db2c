/**
 * The money path's store modules (credits, requests, tasks) run the same statements on SQLite
 * and on a real PostgreSQL: each case below runs on both. On PostgreSQL two pools on one
 * database stand for two instances, so the races are real: two charges at a key's cap − 1, two
 * async submissions for a user's last queue place, refunds of one request from both sides.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { IdempotencyKeyTaken, KeyCreditCapReached, TaskQueueFull, type FailedOutcome, type ImageCharge } from "../../src/core/store";
import { ApiKeyStore } from "../../src/store/apiKeys";
import { retryWhileBusy } from "../../src/store/busy";
import { CreditStore } from "../../src/store/credits";
import { RequestStore } from "../../src/store/requests";
import { Revisions } from "../../src/store/revisions";
import type { SqlClient } from "../../src/store/sql";
import { TaskRecords } from "../../src/store/tasks";
import { UserStore } from "../../src/store/users";
import { bothEngines } from "../support/bothEngines";

/** The money-path modules of one instance on one SQL client. */
function flow(sql: SqlClient) {
  const revisions = new Revisions(sql);
  return { sql, users: new UserStore(sql, revisions), keys: new ApiKeyStore(sql, revisions), credits: new CreditStore(sql), requests: new RequestStore(sql), tasks: new TaskRecords(sql) };
}
type Flow = ReturnType<typeof flow>;

/** As the server's whenWritable: a write that meets another writer (busy, serialization failure, deadlock) is retried. */
const writable = <T>(write: () => Promise<T>) => retryWhileBusy(write, { maxWaitMs: 10_000 });

const FAILED: FailedOutcome = { status: "failed", errorCode: "upstream_failed", errorMessage: "the upstream failed" };
const charge = (requestId: string, userId: number, extra: Partial<ImageCharge> = {}): ImageCharge => ({
  requestId, userId, keyId: null, kind: "generate", model: "test-image", price: 1, prompt: "a red square", ...extra,
});


let emails = 0;

for (const engine of bothEngines()) {
  describe(`the money path on ${engine.name}`, () => {
    let a: Flow;
    let b: Flow;
    beforeAll(async () => {
      const opened = await engine.open();
      a = flow(opened.a);
      b = flow(opened.b);
    });
    afterAll(async () => {
      await a.requests.stopChats();
      await b.requests.stopChats();
      await engine.stop();
    });

    const user = async (credits: number) => (await a.users.create({ email: `flow${++emails}@example.com`, passwordHash: null, role: "user", credits }, 1_000)).id;
    const ledgerRows = (requestId: string) => a.sql.all<{ kind: string; amount: number }>("SELECT kind, amount FROM ledger WHERE request_id = ? ORDER BY id", [requestId]);

    test("charge, success and refund: the balance, the ledger (integers, summing to it) and the request row move together", async () => {
      const u = await user(5);
      expect(await a.credits.chargeForImage(charge("ok-1", u, { price: 2 }), 2_000)).toBe(3);
      expect(await b.credits.chargeForImage(charge("bad-1", u), 2_001)).toBe(2);
      expect(await a.requests.markSucceeded("ok-1", { queueMs: 3, generationMs: 40, upstreamId: "up", attempts: 1 }, 2_100)).toBe(true);
      expect(await b.credits.refundOnce("ok-1", FAILED, 2_200)).toBe(false);
      expect(await b.credits.refundOnce("bad-1", FAILED, 2_200)).toBe(true);
      expect(await a.credits.balance(u)).toBe(3);
      expect(await a.credits.ledgerSum(u)).toBe(3);
      expect(await a.credits.ledgerMismatches()).toBe(0);
      expect(await ledgerRows("bad-1")).toEqual([{ kind: "charge", amount: -1 }, { kind: "refund", amount: 1 }]);
      expect(await b.requests.get("ok-1")).toMatchObject({ status: "succeeded", credits_charged: 2, credits_refunded: 0, queue_ms: 3, generation_ms: 40, upstream_id: "up", finished_at: 2_100 });
      expect(await b.requests.get("bad-1")).toMatchObject({ status: "failed", credits_charged: 1, credits_refunded: 1, error_code: "upstream_failed" });
      expect((await a.requests.spentByUsers([u])).get(u)).toBe(2);
      expect(await a.requests.count({ userId: u, kind: "image" })).toBe(2);
      const totals = await a.credits.ledgerTotalsSince(0);
      expect(totals.byKind.get("charge")).toBeGreaterThanOrEqual(3);
      expect(typeof totals.lastId).toBe("number");
      await expect(a.credits.chargeForImage(charge("broke", u, { price: 5 }), 2_300)).rejects.toMatchObject({ name: "InsufficientCreditsError", cost: { price: 5, balance: 3 } });
      expect(await a.requests.get("broke")).toBeNull();
    });

    test("two instances charging at the key's cap − 1 at once: exactly one is charged, the rest see the cap", async () => {
      const u = await user(10);
      const key = await a.keys.create({ userId: u, name: "capped", prefix: `sk-atl-cap${emails}`, secretHash: `hash-cap-${engine.name}`, limits: { expiresAt: null, creditCap: 2, allowedModels: null } }, 1_000);
      await a.credits.chargeForImage(charge(`cap0-${engine.name}`, u, { keyId: key.id }), 3_000);
      const tries = [a, b, a, b].map((s, i) => writable(() => s.credits.chargeForImage(charge(`cap${i + 1}-${engine.name}`, u, { keyId: key.id }), 3_001)));
      const results = await Promise.allSettled(tries);
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      for (const r of results) if (r.status === "rejected") expect(r.reason).toBeInstanceOf(KeyCreditCapReached);
      expect(await b.credits.balance(u)).toBe(8);
      expect(await b.credits.ledgerSum(u)).toBe(8);
    });

    test("refunds of one request from both instances and a recovery at once: refunded once", async () => {
      const u = await user(3);
      await a.credits.chargeForImage(charge(`race-${engine.name}`, u), 4_000);
      const refunds = await Promise.all([
        writable(() => a.credits.refundOnce(`race-${engine.name}`, FAILED, 4_001)),
        writable(() => b.credits.refundOnce(`race-${engine.name}`, FAILED, 4_001)),
        writable(() => b.credits.recoverInterrupted(4_001)).then((ids) => ids.includes(`race-${engine.name}`)),
        writable(() => a.credits.refundOnce(`race-${engine.name}`, FAILED, 4_001)),
      ]);
      expect(refunds.filter(Boolean)).toHaveLength(1);
      expect(await a.credits.balance(u)).toBe(3);
      expect(await ledgerRows(`race-${engine.name}`)).toEqual([{ kind: "charge", amount: -1 }, { kind: "refund", amount: 1 }]);
    });

    test("a charge whose COMMIT may have been lost is settled: refunded once if it landed, nothing written if not", async () => {
      const u = await user(3);
      const LOST: FailedOutcome = { status: "failed", errorCode: "database_unavailable", errorMessage: "the charge was undone" };
      await a.credits.chargeForImage(charge(`lost-${engine.name}`, u), 4_500);
      const settles = await Promise.all([a, b, a].map((s) => writable(() => s.credits.refundLostCharge({ requestId: `lost-${engine.name}`, userId: u }, LOST, 4_501))));
      expect(settles.filter(Boolean)).toHaveLength(1);
      expect(await b.credits.refundLostCharge({ requestId: `never-${engine.name}`, userId: u }, LOST, 4_502)).toBe(false);
      expect(await a.requests.get(`never-${engine.name}`)).toBeNull();
      expect(await a.requests.get(`lost-${engine.name}`)).toMatchObject({ status: "failed", error_code: "database_unavailable", credits_refunded: 1 });
      expect(await a.credits.balance(u)).toBe(3);
      expect(await a.credits.ledgerSum(u)).toBe(3);
    });

    test("a success or refund run again after its connection was lost finds its own change and says so; a plain second call, or another outcome, still does not", async () => {
      const u = await user(4);
      const [ok, bad, swept] = ["ok", "bad", "swept"].map((n) => `again-${n}-${engine.name}`) as [string, string, string];
      for (const id of [ok, bad, swept]) await a.credits.chargeForImage(charge(id, u), 4_600);
      const lost = { mayHaveLanded: true };
      // The first run committed (its answer lost); whenWritable runs it again, saying so.
      expect(await a.requests.markSucceeded(ok, { queueMs: 1, generationMs: 2 }, 4_601)).toBe(true);
      expect(await a.requests.markSucceeded(ok, { queueMs: 1, generationMs: 2 }, 4_602, lost)).toBe(true);
      expect(await a.requests.markSucceeded(ok, { queueMs: 1, generationMs: 2 }, 4_602)).toBe(false);
      expect(await b.credits.refundOnce(bad, FAILED, 4_603)).toBe(true);
      expect(await b.credits.refundOnce(bad, FAILED, 4_603, lost)).toBe(true);
      expect(await b.credits.refundOnce(bad, FAILED, 4_603)).toBe(false);
      // Ended by someone else (a sweep's interrupted refund): the retry did not do it.
      expect(await b.credits.refundInterrupted(swept, "the instance running the request stopped", 4_604)).toBe(true);
      expect(await a.requests.markSucceeded(swept, { queueMs: 1, generationMs: 2 }, 4_605, lost)).toBe(false);
      expect(await a.credits.refundOnce(swept, FAILED, 4_605, lost)).toBe(false);
      expect(await a.credits.refundOnce(ok, FAILED, 4_605, lost)).toBe(false);
      expect(await a.credits.balance(u)).toBe(3);
      expect(await a.credits.ledgerSum(u)).toBe(3);
      expect(await ledgerRows(bad)).toEqual([{ kind: "charge", amount: -1 }, { kind: "refund", amount: 1 }]);
    });

    test("async tasks: the charge writes the task, its inputs and the key claim; the queue reads, starts once and expires", async () => {
      const u = await user(5);
      const inputs = [{ role: "image" as const, param: "image", mime: "image/png" as const, width: 1, height: 1, bytes: new Uint8Array([137, 80, 78, 71, 0, 255]) }];
      const task = (mode: "async" | "sync") => ({ mode, status: "queued" as const, endpoint: "edits" as const, model: "test-image", inputs, job: { model: "test-image", prompt: "p", size: null, quality: "auto", extra: {} } });
      const idem = { key: `k-${engine.name}`, fingerprint: "f1", expiresAt: 9_000 };
      await a.credits.chargeForImage(charge(`t1-${engine.name}`, u, { task: task("async"), idempotency: idem }), 5_000);
      await b.credits.chargeForImage(charge(`t2-${engine.name}`, u, { task: task("async") }), 5_001);
      await expect(b.credits.chargeForImage(charge(`t3-${engine.name}`, u, { task: task("async"), idempotency: idem }), 5_002)).rejects.toBeInstanceOf(IdempotencyKeyTaken);
      expect(await a.requests.get(`t3-${engine.name}`)).toBeNull();
      expect(await a.credits.balance(u)).toBe(3);
      expect(await b.tasks.idempotency(u, idem.key, 5_002)).toMatchObject({ request_id: `t1-${engine.name}`, fingerprint: "f1", expires_at: 9_000 });
      expect((await b.tasks.inputs(`t1-${engine.name}`))[0]).toEqual(inputs[0]!);
      expect(await a.tasks.queuePosition(`t2-${engine.name}`)).toBe(2);
      expect(await a.tasks.asyncLoad(u)).toEqual({ all: expect.any(Number), user: 2 });
      expect((await a.tasks.list(u, { limit: 10 })).map((t) => t.id)).toEqual([`t2-${engine.name}`, `t1-${engine.name}`]);
      expect((await a.tasks.list(u, { limit: 10, after: `t2-${engine.name}` })).map((t) => t.id)).toEqual([`t1-${engine.name}`]);
      // Two runners claim the same queued task: one wins.
      expect((await Promise.all([a.tasks.start(`t1-${engine.name}`, 5_100, u, 5), b.tasks.start(`t1-${engine.name}`, 5_100, u, 5)])).filter(Boolean)).toHaveLength(1);
      expect(await a.requests.markSucceeded(`t1-${engine.name}`, { queueMs: 100, generationMs: 5, task: { result: "{}", expiresAt: 6_000 } }, 5_200)).toBe(true);
      // A keyed task is kept until its key expires (9 000), past its retention (6 000); an unkeyed one, its retention.
      expect(await b.tasks.get(`t1-${engine.name}`)).toMatchObject({ status: "succeeded", result: "{}", expires_at: 9_000, keep_until: 9_000 });
      expect(await a.tasks.inputs(`t1-${engine.name}`)).toEqual([]);
      const canceled = { status: "failed" as const, errorCode: "task_canceled", errorMessage: "canceled", task: { status: "canceled" as const, error: { message: "canceled", type: "invalid_request_error", param: null, code: "task_canceled" }, expiresAt: 6_000 } };
      expect(await b.credits.refundOnce(`t2-${engine.name}`, canceled, 5_300)).toBe(true);
      expect(await a.tasks.get(`t2-${engine.name}`)).toMatchObject({ status: "canceled", expires_at: 6_000, keep_until: null });
      expect(await a.tasks.expire(6_000)).toBeGreaterThanOrEqual(1);
      expect(await b.tasks.get(`t2-${engine.name}`)).toMatchObject({ expired: 1, error: null });
      expect(await b.tasks.get(`t1-${engine.name}`)).toMatchObject({ expired: 0, result: "{}" });
      expect(await a.tasks.expire(9_000)).toBeGreaterThanOrEqual(1);
      expect(await b.tasks.get(`t1-${engine.name}`)).toMatchObject({ expired: 1, result: null });
    });

    test("a cancel of a running task is recorded for the instance that runs it: once (the first time kept), and only while it runs", async () => {
      const u = await user(5);
      const queued = { mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image" };
      for (const id of ["c1", "c2", "c3"]) await a.credits.chargeForImage(charge(`${id}-${engine.name}`, u, { task: queued }), 8_000);
      const [c1, c2, c3] = ["c1", "c2", "c3"].map((id) => `${id}-${engine.name}`) as [string, string, string];
      expect(await b.tasks.requestCancel(c1, 8_050)).toBe(false); // still queued: the queued path refunds it instead
      for (const id of [c1, c2, c3]) expect(await a.tasks.start(id, 8_100, u, 3)).toBe(true);
      expect(await a.tasks.toAbort([c1, c2, c3])).toEqual([]);
      expect(await b.tasks.requestCancel(c1, 8_200)).toBe(true);
      expect(await b.tasks.requestCancel(c1, 8_300)).toBe(true);
      expect(await a.tasks.get(c1)).toMatchObject({ status: "running", cancel_requested_at: 8_200 });
      // Ended elsewhere (refunded by a cancel that raced the claim): its runner must stop it too.
      const canceled = { ...FAILED, task: { status: "canceled" as const, error: { message: "canceled", type: "invalid_request_error", param: null, code: "task_canceled" }, expiresAt: 9_000 } };
      expect(await b.credits.refundOnce(c3, canceled, 8_400)).toBe(true);
      expect((await a.tasks.toAbort([c1, c2, c3])).sort()).toEqual([c1, c3].sort());
      expect(await b.tasks.requestCancel(c3, 8_500)).toBe(false);
      expect(await a.tasks.toAbort([])).toEqual([]);
    });

    test("a user's async tasks running at once are bounded across instances: two instances starting that user's tasks together start one under a limit of 1", async () => {
      const u = await user(9);
      const other = await user(9);
      const queued = { mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image" };
      const ids = ["s1", "s2", "s3"].map((id) => `${id}-${engine.name}`) as [string, string, string];
      for (const id of ids) await a.credits.chargeForImage(charge(id, u, { task: queued }), 9_000);
      await a.credits.chargeForImage(charge(`s4-${engine.name}`, other, { task: queued }), 9_000);
      // Each instance alone has nothing of this user running: only the store's count can refuse.
      const started = await Promise.all([a.tasks.start(ids[0], 9_100, u, 1), b.tasks.start(ids[1], 9_100, u, 1)]);
      expect(started.filter(Boolean)).toHaveLength(1);
      expect(await a.tasks.start(ids[2], 9_101, u, 1)).toBe(false);
      expect(await b.tasks.get(ids[2])).toMatchObject({ status: "queued" });
      // Another user's task is not held back, and a higher limit lets this user's second start.
      expect(await b.tasks.start(`s4-${engine.name}`, 9_102, other, 1)).toBe(true);
      expect(await b.tasks.start(ids[2], 9_103, u, 2)).toBe(true);
      // Once one ends, the bound makes room again.
      const running = ids.filter((_, i) => i === 2 || started[i]);
      expect(await a.requests.markSucceeded(running[0]!, { queueMs: 100, generationMs: 5, task: { result: "{}", expiresAt: 99_000 } }, 9_200)).toBe(true);
      const waiting = ids.find((id, i) => i < 2 && !started[i])!;
      expect(await a.tasks.start(waiting, 9_300, u, 2)).toBe(true);
    });

    // SQLite's write lock serialises starts; on PostgreSQL two instances' starts overlap for real.
    test.if(engine.name === "PostgreSQL")("a start that overlaps another instance's start of the same user's task does not start it, and does not wait: the next pass counts the other", async () => {
      const u = await user(9);
      const queued = { mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image" };
      const [first, second] = ["o1", "o2"].map((id) => `${id}-${engine.name}`) as [string, string];
      for (const id of [first, second]) await a.credits.chargeForImage(charge(id, u, { task: queued }), 9_500);
      // Instance b's start of `first`, held open before its commit (as start() takes it: the user's row, then the claim).
      await b.sql.transaction(async (tx) => {
        await tx.get("SELECT id FROM users WHERE id = ? FOR UPDATE", [u]);
        expect((await tx.run("UPDATE tasks SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'", [9_600, first])).changes).toBe(1);
        // Answered while b's transaction is still open.
        expect(await a.tasks.start(second, 9_600, u, 2)).toBe(false);
      });
      expect(await a.tasks.get(second)).toMatchObject({ status: "queued" });
      expect(await a.tasks.start(second, 9_700, u, 1)).toBe(false);
      expect(await a.tasks.start(second, 9_700, u, 2)).toBe(true);
    });

    test.if(engine.name === "PostgreSQL")("a start is not held back by a row of the user's being written (an insert's KEY SHARE on the user), only by a charge's or another start's lock", async () => {
      const u = await user(9);
      const queued = { mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image" };
      const id = `k1-${engine.name}`;
      await a.credits.chargeForImage(charge(id, u, { task: queued }), 9_900);
      await b.sql.transaction(async (tx) => {
        // A chat row of theirs being written: its foreign key locks the user's row FOR KEY SHARE.
        await tx.run("INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at) VALUES (?, ?, 'chat', '/v1/chat/completions', 'm', 'succeeded', ?)", [`k-chat-${engine.name}`, u, 9_900]);
        expect(await a.tasks.start(id, 9_910, u, 5)).toBe(true);
      });
    });

    test.if(engine.name === "PostgreSQL")("a start never waits on a request row held by a refund of that task: it answers false at once, and the refund goes through", async () => {
      const u = await user(9);
      const queued = { mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image" };
      const id = `r1-${engine.name}`;
      await a.credits.chargeForImage(charge(id, u, { task: queued }), 9_800);
      await b.sql.transaction(async (tx) => {
        // A cancel's refund locks the request's row first (store/credits refundPending).
        await tx.run("UPDATE requests SET error_code = error_code WHERE id = ?", [id]);
        expect(await a.tasks.start(id, 9_810, u, 5)).toBe(false);
      });
      const canceled = { ...FAILED, task: { status: "canceled" as const, error: { message: "canceled", type: "invalid_request_error", param: null, code: "task_canceled" }, expiresAt: 99_000 } };
      expect(await b.credits.refundOnce(id, canceled, 9_820)).toBe(true);
      expect(await a.tasks.start(id, 9_830, u, 5)).toBe(false);
      expect(await a.tasks.get(id)).toMatchObject({ status: "canceled" });
    });

    test("two async submissions for a user's last queue place, one on each instance: one is charged, the other is TaskQueueFull", async () => {
      const u = await user(5);
      const queued = { mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image", queueLimits: { queueSize: 1_000, perUserQueueSize: 2 } };
      await a.credits.chargeForImage(charge(`q0-${engine.name}`, u, { task: queued }), 7_000);
      const results = await Promise.allSettled([a, b].map((s, i) => writable(() => s.credits.chargeForImage(charge(`q${i + 1}-${engine.name}`, u, { task: queued }), 7_001))));
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      expect(results.find((r) => r.status === "rejected")).toMatchObject({ reason: expect.any(TaskQueueFull) });
      expect(await a.tasks.asyncLoad(u)).toMatchObject({ user: 2 });
      expect(await a.credits.balance(u)).toBe(3);
    });

    test("two users' async submissions for the server's last queue place, one on each instance: exactly one is admitted", async () => {
      const [u1, u2] = [await user(5), await user(5)];
      const load = (await a.tasks.asyncLoad(u1)).all;
      const queued = { mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image", queueLimits: { queueSize: load + 1, perUserQueueSize: 10 } };
      const results = await Promise.allSettled(
        [
          [a, u1],
          [b, u2],
        ].map(([s, u], i) => writable(() => (s as typeof a).credits.chargeForImage(charge(`g${i}-${engine.name}`, u as number, { task: queued }), 7_100))),
      );
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      expect(results.find((r) => r.status === "rejected")).toMatchObject({ reason: expect.any(TaskQueueFull) });
      expect((await a.tasks.asyncLoad(u1)).all).toBe(load + 1);
    });

    test("chat rows are batched and read back after a flush; the CSV export pages by key", async () => {
      const u = await user(0);
      for (let i = 0; i < 3; i++) {
        a.requests.recordChat({ id: `chat-${engine.name}-${i}`, userId: u, keyId: null, model: "chat", status: "succeeded", promptTokens: 3, completionTokens: 1, generationMs: 5 }, 8_000 + i);
      }
      expect(await a.requests.recordOf(`chat-${engine.name}-0`)).toMatchObject({ kind: "chat", status: "succeeded" });
      expect(await a.requests.count({ userId: u, kind: "chat" })).toBe(3);
      expect(await b.requests.count({ userId: u, kind: "chat" })).toBe(3);
      const first = await b.requests.exportPage(u, null, 2);
      expect(first.map((r) => r.id)).toEqual([`chat-${engine.name}-2`, `chat-${engine.name}-1`]);
      const last = first[1]!;
      expect((await b.requests.exportPage(u, { createdAt: last.created_at, id: last.id }, 2)).map((r) => r.id)).toEqual([`chat-${engine.name}-0`]);
      expect(await b.requests.pendingCount()).toBeGreaterThanOrEqual(0);
    });

    test("a batch of 157 chat rows (written as multi-row INSERTs of 64, 16, 4 and 1) lands whole, every row with its own values", async () => {
      const u = await user(0);
      const n = 157;
      for (let i = 0; i < n; i++) {
        const failed = i % 5 === 0;
        a.requests.recordChat(
          {
            id: `batch-${engine.name}-${String(i).padStart(3, "0")}`, userId: u, keyId: null, model: `chat-${i % 3}`, prompt: `prompt ${i}`,
            status: failed ? "failed" : "succeeded", generationMs: i, queueMs: failed ? undefined : i % 7,
            promptTokens: failed ? undefined : i, completionTokens: failed ? undefined : i + 1,
            errorCode: failed ? "upstream_failed" : undefined, errorMessage: failed ? `failure ${i}` : undefined, errorDetail: failed ? `detail ${i}` : null,
            upstreamId: failed ? undefined : "up", accountId: failed ? undefined : `acct-${i % 2}`, attempts: failed ? undefined : 1 + (i % 3), upstreamLatencyMs: failed ? undefined : i * 2,
          },
          10_000 + i,
        );
      }
      expect(await a.requests.flushChats()).toBe(true);
      const rows = await b.sql.all<Record<string, unknown>>("SELECT * FROM requests WHERE user_id = ? ORDER BY id", [u]);
      expect(rows.length).toBe(n);
      rows.forEach((r, i) => {
        const failed = i % 5 === 0;
        expect(r).toMatchObject({
          id: `batch-${engine.name}-${String(i).padStart(3, "0")}`, user_id: u, key_id: null, kind: "chat", endpoint: "/v1/chat/completions",
          model: `chat-${i % 3}`, prompt: `prompt ${i}`, status: failed ? "failed" : "succeeded", credits_charged: 0, credits_refunded: 0,
          generation_ms: i, queue_ms: failed ? null : i % 7, prompt_tokens: failed ? null : i, completion_tokens: failed ? null : i + 1,
          error_code: failed ? "upstream_failed" : null, error_message: failed ? `failure ${i}` : null, error_detail: failed ? `detail ${i}` : null,
          upstream_id: failed ? null : "up", account_id: failed ? null : `acct-${i % 2}`, attempts: failed ? null : 1 + (i % 3), upstream_latency_ms: failed ? null : i * 2,
          created_at: 10_000 + i - i, finished_at: 10_000 + i,
        });
      });
    });
  });
}

test("whenWritable tells each run whether an earlier one lost its connection (and may have committed)", async () => {
  const seen: boolean[] = [];
  const lostConnection = Object.assign(new Error("Connection closed"), { code: "ERR_POSTGRES_CONNECTION_CLOSED" });
  const conflict = Object.assign(new Error("could not serialize access"), { errno: "40001" });
  const errors = [conflict, lostConnection, conflict];
  const result = await retryWhileBusy(
    (attempt) => {
      seen.push(attempt.mayHaveLanded);
      const e = errors.shift();
      if (e) throw e;
      return "landed";
    },
    { maxWaitMs: Infinity, sleep: async () => {} },
  );
  expect(result).toBe("landed");
  expect(seen).toEqual([false, false, true, true]);
});
