/**
 * Text holding U+0000 on SQLite and on a real PostgreSQL (which refuses it in text: "invalid
 * byte sequence for encoding UTF8: 0x00"). The store writes such text with U+FFFD in its place on
 * both engines (store/sql.ts storedParams), so what quotes a client's or an upstream's words (a
 * prompt, a refund's error message, a webhook receiver's answer, a chat row) is written, and
 * reads back the same on both; a lookup by such a value finds nothing, as for any unknown one.
 * And the chat batch (core/batchWriter): a row the database refuses costs only itself, never
 * the other clients' rows in its batch, nor their usage counts. A SQLite database written
 * before, whose text may hold U+0000, moves to PostgreSQL (migrate-store) the same way.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { FailedOutcome, ImageCharge } from "../../src/core/store";
import { CreditStore } from "../../src/store/credits";
import { historyPage } from "../../src/store/historyPages";
import { RequestStore } from "../../src/store/requests";
import { Revisions } from "../../src/store/revisions";
import { isUniqueViolation, type SqlClient } from "../../src/store/sql";
import { TaskRecords } from "../../src/store/tasks";
import { UserStore } from "../../src/store/users";
import { WebhookStore } from "../../src/store/webhooks";
import { copySqliteToPostgres } from "../../src/store/copyToPostgres";
import { openDatabase } from "../../src/store/database";
import { bothEngines } from "../support/bothEngines";
import { startPostgres } from "../support/postgresServer";

const NUL = "\u0000";
const REPLACEMENT = "\uFFFD";

function modules(sql: SqlClient) {
  const requests = new RequestStore(sql);
  const dropped: { count: number; error: unknown }[] = [];
  requests.onDroppedRows = (count, error) => dropped.push({ count, error });
  return { sql, users: new UserStore(sql, new Revisions(sql)), credits: new CreditStore(sql), requests, dropped, tasks: new TaskRecords(sql), webhooks: new WebhookStore(sql) };
}
type Modules = ReturnType<typeof modules>;

const charge = (requestId: string, userId: number, extra: Partial<ImageCharge> = {}): ImageCharge => ({
  requestId, userId, keyId: null, kind: "generate", model: "test-image", price: 1, prompt: "a red square", ...extra,
});

let emails = 0;

for (const engine of bothEngines()) {
  describe(`U+0000 in text on ${engine.name}`, () => {
    let m: Modules;
    beforeAll(async () => {
      m = modules((await engine.open()).a);
    });
    afterAll(async () => {
      await m.requests.stopChats();
      await engine.stop();
    });

    const user = async (credits: number) => (await m.users.create({ email: `nul${++emails}@example.com`, passwordHash: null, role: "user", credits }, 1_000)).id;
    const chatUsage = async (userId: number) =>
      (await m.sql.get<{ n: number | null }>("SELECT CAST(SUM(requests) AS BIGINT) AS n FROM chat_usage WHERE user_id = ?", [userId]))?.n ?? 0;

    test("a prompt and a refund's error message holding it are written with U+FFFD, and the refund lands", async () => {
      const u = await user(3);
      expect(await m.credits.chargeForImage(charge("nul-prompt", u, { prompt: `a${NUL}b` }), 2_000)).toBe(2);
      // An upstream's 400 quoting back what the client sent: the refund records its words.
      const failed: FailedOutcome = { status: "failed", errorCode: "upstream_rejected", errorMessage: `Invalid value: 'bo${NUL}gus'.`, errorDetail: `style=bo${NUL}gus` };
      expect(await m.credits.refundOnce("nul-prompt", failed, 2_100)).toBe(true);
      expect(await m.credits.balance(u)).toBe(3);
      expect(await m.credits.ledgerMismatches()).toBe(0);
      expect(await m.requests.pendingCount()).toBe(0);
      expect(await m.requests.get("nul-prompt")).toMatchObject({
        status: "failed",
        credits_refunded: 1,
        prompt: `a${REPLACEMENT}b`,
        error_message: `Invalid value: 'bo${REPLACEMENT}gus'.`,
        error_detail: `style=bo${REPLACEMENT}gus`,
      });
    });

    test("a chat row holding it is written with U+FFFD, with the other users' rows of its batch and their counts", async () => {
      const [a, b] = [await user(0), await user(0)];
      for (let i = 0; i < 3; i++) m.requests.recordChat({ id: `nul-chat-a${i}`, userId: a, keyId: null, model: "chat", status: "succeeded", prompt: `hello ${i}` }, 3_000 + i);
      m.requests.recordChat({ id: "nul-chat-b", userId: b, keyId: null, model: "chat", status: "failed", prompt: `x${NUL}y`, errorMessage: `no${NUL}` }, 3_010);
      expect(await m.requests.flushChats()).toBe(true);
      expect(m.dropped).toEqual([]);
      expect(await m.requests.count({ userId: a })).toBe(3);
      expect(await m.requests.get("nul-chat-b")).toMatchObject({ prompt: `x${REPLACEMENT}y`, error_message: `no${REPLACEMENT}` });
      expect([await chatUsage(a), await chatUsage(b)]).toEqual([3, 1]);
    });

    test("a webhook attempt quoting a receiver's answer holding it is recorded: the attempt counts, the delivery ends", async () => {
      const u = await user(0);
      expect(await m.webhooks.enqueue([{ eventId: "evt_nul", userId: u, eventType: "image.task.failed", source: "endpoint", url: "https://hooks.example/x", payload: "{}" }], 4_000)).toBe(1);
      const [claimed] = await m.webhooks.claimDue(4_000, 10, 4_000 + 60_000);
      await m.webhooks.recordAttempt(claimed!.id, { at: 4_001, status: 500, error: `HTTP 500: oops${NUL}`, durationMs: 5 }, { state: "failed" });
      const [delivery] = await m.webhooks.recentDeliveries(u, 1);
      expect(delivery).toMatchObject({ state: "failed", attempts: 1, last_status: 500, last_error: `HTTP 500: oops${REPLACEMENT}` });
      expect((await m.webhooks.attemptsOf([claimed!.id])).map((a) => a.error)).toEqual([`HTTP 500: oops${REPLACEMENT}`]);
      // Ended: its lease running out does not make it due again.
      expect(await m.webhooks.claimDue(4_000 + 120_000, 10, 4_000 + 180_000)).toEqual([]);
    });

    test("a lookup by a value holding it finds nothing, as for any unknown value (never the value cut at U+0000)", async () => {
      const u = await user(2);
      const task = (prompt: string) => ({ mode: "async" as const, status: "queued" as const, endpoint: "generations" as const, model: "test-image", job: { model: "test-image", prompt, size: null, quality: "auto", extra: {} } });
      await m.credits.chargeForImage(charge("req_nul1", u, { prompt: `p${NUL}`, task: task(`p${NUL}`), idempotency: { key: "idem-nul", fingerprint: "f", expiresAt: 9_000 } }), 5_000);
      await m.credits.chargeForImage(charge("req_nul2", u, { task: task("q") }), 5_001);
      expect(JSON.parse((await m.tasks.get("req_nul1"))!.job!).prompt).toBe(`p${NUL}`);
      expect(await m.requests.get(`req_nul1${NUL}`)).toBeNull();
      expect(await m.tasks.get(`req_nul1${NUL}`)).toBeNull();
      expect(await m.tasks.get(`req_${NUL}`)).toBeNull();
      expect((await m.tasks.list(u, { limit: 10, after: "req_nul2" })).map((t) => t.id)).toEqual(["req_nul1"]);
      expect(await m.tasks.list(u, { limit: 10, after: `req_nul2${NUL}` })).toEqual(await m.tasks.list(u, { limit: 10, after: "req_unknown" }));
      expect(await m.users.byEmail(`nul${emails}@example.com${NUL}`)).toBeNull();
      expect((await historyPage(m.sql, { userId: u }, null, 10)).rows.map((r) => r.id)).toEqual(["req_nul2", "req_nul1"]);
      expect((await historyPage(m.sql, { userId: u, model: `test-image${NUL}` }, null, 10)).rows).toEqual([]);
      // A cursor is a position, not a lookup: one holding it reads on from where it sorts (after "req_nul2", as U+FFFD sorts after ASCII).
      expect((await historyPage(m.sql, { userId: u }, { older: { createdAt: 5_001, id: `req_nul2${NUL}` } }, 10)).rows.map((r) => r.id)).toEqual(["req_nul2", "req_nul1"]);
      expect((await historyPage(m.sql, { id: `req_nul1${NUL}` }, null, 10)).rows).toEqual([]);
    });

    test("a chat row the database refuses (an id already taken) is dropped alone: the rest of its batch and their counts are written", async () => {
      const [a, b] = [await user(1), await user(0)];
      await m.credits.chargeForImage(charge("taken-id", a), 6_000);
      for (let i = 0; i < 5; i++) m.requests.recordChat({ id: `iso-a${i}`, userId: a, keyId: null, model: "chat", status: "succeeded" }, 6_100 + i);
      m.requests.recordChat({ id: "taken-id", userId: b, keyId: null, model: "chat", status: "succeeded" }, 6_110);
      m.requests.recordChat({ id: "iso-b", userId: b, keyId: null, model: "chat", status: "succeeded" }, 6_111);
      const before = m.dropped.length;
      expect(await m.requests.flushChats()).toBe(true);
      expect(m.dropped.slice(before).map((d) => d.count)).toEqual([1]);
      expect(isUniqueViolation(m.dropped.at(-1)!.error)).toBe(true);
      expect((await m.requests.list({ userId: a, kind: "chat" })).map((r) => r.id).sort()).toEqual(["iso-a0", "iso-a1", "iso-a2", "iso-a3", "iso-a4"]);
      expect((await m.requests.list({ userId: b })).map((r) => r.id)).toEqual(["iso-b"]);
      // The counts of exactly the rows written: the dropped row's count went with it.
      expect([await chatUsage(a), await chatUsage(b)]).toEqual([5, 1]);
      expect(await m.requests.get("taken-id")).toMatchObject({ kind: "image", user_id: a });
    });
  });
}

test("a SQLite database holding U+0000 from before (written raw) is copied to PostgreSQL with U+FFFD in its place", async () => {
  const source = openDatabase(":memory:");
  source.query("INSERT INTO users (email, role, credits, created_at) VALUES (?, 'user', 0, 1000)").run(`old${NUL}@example.com`);
  source.query("INSERT INTO requests (id, user_id, kind, endpoint, model, status, prompt, created_at) VALUES ('req_old', 1, 'chat', '/v1/chat/completions', 'chat', 'succeeded', ?, 1000)").run(`p${NUL}`);
  const pg = await startPostgres({ migrated: true });
  try {
    const target = pg.client();
    await copySqliteToPostgres(source, target);
    expect(await target.all("SELECT email FROM users")).toEqual([{ email: `old${REPLACEMENT}@example.com` }]);
    expect(await target.get("SELECT prompt FROM requests WHERE id = 'req_old'")).toEqual({ prompt: `p${REPLACEMENT}` });
  } finally {
    source.close();
    await pg.stop();
  }
});
