/**
 * Every balance change lives here, each inside one transaction together with its ledger row
 * (and, for images, the request record). The schema backs this up: credits >= 0,
 * refunded <= charged, and at most one charge and one refund row per request.
 *
 * Written once for both SQL clients (store/sql.ts): SQLite's BEGIN IMMEDIATE serialises every
 * transaction; on PostgreSQL (READ COMMITTED) the rows a decision reads are locked first
 * (`forUpdate`) or the write itself is conditional (`… WHERE status = 'pending'`,
 * `… AND credits >= ?`), so two instances cannot both pass the same check.
 */
import { forUpdate, type SqlClient, type SqlQueries } from "./sql";
import { KEY_SPEND_SQL } from "./apiKeys";
import { ASYNC_LOAD_SQL, asyncLoadOf, TASK_EXPIRES_AT_SQL, type AsyncLoadRow } from "./tasks";
import { newInstanceId } from "./instanceId";
import {
  assertAsyncRoom,
  IdempotencyKeyTaken,
  InsufficientCreditsError,
  KeyCreditCapReached,
  type CreditLedger,
  type FailedOutcome,
  type ImageCharge,
  type LedgerRow,
  type WriteAttempt,
} from "../core/store";

export { InsufficientCreditsError } from "../core/store";
export type { ImageCharge, LedgerRow } from "../core/store";

/**
 * The task row of a charged request (and its stored inputs), inside the charge's transaction. A
 * keyed task is kept at least as long as its key (keep_until).
 */
async function insertTask(tx: SqlQueries, c: ImageCharge, now: number): Promise<void> {
  const t = c.task!;
  await tx.run(
    `INSERT INTO tasks (id, user_id, mode, status, endpoint, model, job, webhook_url, created_at, started_at, keep_until)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    [c.requestId, c.userId, t.mode, t.status, t.endpoint, t.model, t.job ? JSON.stringify(t.job) : null, t.webhookUrl ?? null, now, t.status === "running" ? now : null, c.idempotency?.expiresAt ?? null],
  );
  for (const [i, input] of (t.inputs ?? []).entries()) {
    await tx.run("INSERT INTO task_inputs (task_id, position, role, param, mime, width, height, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
      c.requestId, i, input.role, input.param, input.mime, input.width, input.height, input.bytes,
    ]);
  }
}

/**
 * Claims the Idempotency-Key for this request. A key still answering for a live or succeeded
 * request is not taken over (IdempotencyKeyTaken rolls the whole charge back); an expired one,
 * or one whose request failed and was refunded, is.
 */
async function claimIdempotencyKey(tx: SqlQueries, c: ImageCharge, now: number): Promise<void> {
  const k = c.idempotency!;
  const claimed = await tx.run(
    `INSERT INTO idempotency_keys (user_id, key, fingerprint, request_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT (user_id, key) DO UPDATE SET fingerprint = excluded.fingerprint, request_id = excluded.request_id,
            created_at = excluded.created_at, expires_at = excluded.expires_at
      WHERE idempotency_keys.expires_at <= ?
         OR (SELECT status FROM requests WHERE id = idempotency_keys.request_id) IN ('failed', 'interrupted')`,
    [c.userId, k.key, k.fingerprint, c.requestId, now, k.expiresAt, now],
  );
  if (claimed.changes !== 1) throw new IdempotencyKeyTaken(`the Idempotency-Key is held by another request`);
}

/**
 * The refund of a pending request, inside the caller's transaction: the status transition
 * (conditional on 'pending') guards it, so it happens at most once whoever asks. True when
 * this call refunded, also when a retry (`retry.mayHaveLanded`, the same `now`) finds the row
 * ended exactly as this call ends it: its earlier run committed, its answer lost. (Another
 * refund with the same status and error code in the same millisecond would be taken for it:
 * only the answer could be wrong then, never the credits.)
 */
async function refundPending(tx: SqlQueries, requestId: string, failure: FailedOutcome, now: number, retry?: WriteAttempt): Promise<boolean> {
  const req = await tx.get<{ user_id: number; credits_charged: number }>(
    `UPDATE requests SET status = ?, error_code = ?, error_message = ?, error_detail = ?, queue_ms = COALESCE(?, queue_ms),
            generation_ms = COALESCE(?, generation_ms), credits_refunded = credits_charged, finished_at = ?
      WHERE id = ? AND status = 'pending' RETURNING user_id, credits_charged`,
    [failure.status, failure.errorCode, failure.errorMessage, failure.errorDetail ?? null, failure.queueMs ?? null, failure.generationMs ?? null, now, requestId],
  );
  if (!req) {
    if (!retry?.mayHaveLanded) return false;
    const ended = await tx.get<{ status: string; error_code: string | null; finished_at: number | null }>("SELECT status, error_code, finished_at FROM requests WHERE id = ?", [requestId]);
    return ended?.status === failure.status && ended.error_code === failure.errorCode && ended.finished_at === now;
  }
  if (failure.task) {
    await tx.run(`UPDATE tasks SET status = ?, error = ?, finished_at = ?, expires_at = ${TASK_EXPIRES_AT_SQL} WHERE id = ? AND status IN ('queued', 'running')`, [
      failure.task.status, JSON.stringify(failure.task.error), now, failure.task.expiresAt, failure.task.expiresAt, requestId,
    ]);
  }
  await tx.run("DELETE FROM task_inputs WHERE task_id = ?", [requestId]);
  if (req.credits_charged > 0) {
    await tx.run("UPDATE users SET credits = credits + ? WHERE id = ?", [req.credits_charged, req.user_id]);
    await tx.run("INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (?, 'refund', ?, ?, ?)", [req.user_id, req.credits_charged, requestId, now]);
  }
  return true;
}

/** The history's endpoint column keeps the route each kind of image request came in on. */
const ENDPOINT_OF_KIND: Record<ImageCharge["kind"], string> = { generate: "/v1/images/generations", edit: "/v1/images/edits" };

/**
 * Refuses a charge that would take the key past its credit cap. Runs inside the charge's
 * transaction with the key's row locked (PostgreSQL; SQLite's write lock already serialises
 * charges), so two requests at cap − 1, on one instance or two, cannot both pass.
 */
async function checkKeyCap(tx: SqlQueries, keyId: number | null, cost: number): Promise<void> {
  if (keyId === null) return;
  const key = await tx.get<{ credit_cap: number | null }>(`SELECT credit_cap FROM api_keys WHERE id = ?${forUpdate(tx)}`, [keyId]);
  const cap = key?.credit_cap ?? null;
  if (cap === null) return;
  // Number(): PostgreSQL answers SUM over BIGINT as numeric unless the statement casts it.
  const spent = Number((await tx.get<{ spent: number | string }>(KEY_SPEND_SQL, [keyId]))?.spent ?? 0);
  if (spent + cost > cap) throw new KeyCreditCapReached(cap);
}

/** The advisory lock (PostgreSQL) that serialises async task admissions across instances. */
const ASYNC_QUEUE_LOCK = 0x61746c71; // "atlq"

/**
 * An async task's queue bounds, checked inside its charge. The per-user bound is safe once the
 * balance update has locked the user's row; the server-wide one needs every instance's
 * admissions in turn: on PostgreSQL a transaction-scoped advisory lock (held only while the
 * count and the insert commit), on SQLite the write lock already does it. Two submissions for
 * the last place cannot both pass.
 */
async function checkAsyncRoom(tx: SqlQueries, c: ImageCharge): Promise<void> {
  const limits = c.task?.queueLimits;
  if (!limits) return;
  if (tx.dialect === "postgres") await tx.get(`SELECT pg_advisory_xact_lock(${ASYNC_QUEUE_LOCK})`);
  assertAsyncRoom(asyncLoadOf(await tx.get<AsyncLoadRow>(ASYNC_LOAD_SQL, [c.userId])), limits);
}

const INTERRUPTED_MESSAGE = "the server stopped before the request finished";

export class CreditStore implements CreditLedger {
  constructor(
    private readonly sql: SqlClient,
    /** The instance whose charges these are: each pending request records it (core/instances). */
    private readonly owner: string = newInstanceId(),
  ) {}

  async balance(userId: number): Promise<number | null> {
    return (await this.sql.get<{ credits: number }>("SELECT credits FROM users WHERE id = ?", [userId]))?.credits ?? null;
  }

  /**
   * Users whose balance differs from the sum of their ledger rows: must always be 0. One pass
   * over the ledger (grouped), joined to the users table.
   */
  async ledgerMismatches(): Promise<number> {
    const row = await this.sql.get<{ n: number }>(
      `SELECT CAST(COUNT(*) AS BIGINT) AS n FROM users u
         LEFT JOIN (SELECT user_id, CAST(SUM(amount) AS BIGINT) AS total FROM ledger GROUP BY user_id) l ON l.user_id = u.id
        WHERE u.credits != COALESCE(l.total, 0)`,
    );
    return row?.n ?? 0;
  }

  /** The ledger's credits by kind in rows after `afterId` (as positive amounts), and the last row id seen. */
  async ledgerTotalsSince(afterId: number): Promise<{ lastId: number; byKind: Map<LedgerRow["kind"], number> }> {
    const rows = await this.sql.all<{ kind: LedgerRow["kind"]; total: number; last: number }>(
      "SELECT kind, CAST(SUM(ABS(amount)) AS BIGINT) AS total, MAX(id) AS last FROM ledger WHERE id > ? GROUP BY kind",
      [afterId],
    );
    return { lastId: rows.reduce((m, r) => Math.max(m, r.last), afterId), byKind: new Map(rows.map((r) => [r.kind, r.total])) };
  }

  /** Adds credits (admin grant). */
  async grant(userId: number, amount: number, now: number, note?: string, actor?: string): Promise<number> {
    if (!Number.isInteger(amount) || amount <= 0) throw new RangeError("grant amount must be a positive integer");
    return this.sql.transaction(async (tx) => {
      const row = await tx.get<{ credits: number }>("UPDATE users SET credits = credits + ? WHERE id = ? RETURNING credits", [amount, userId]);
      if (!row) throw new RangeError(`no user with id ${userId}`);
      await tx.run("INSERT INTO ledger (user_id, kind, amount, note, actor, created_at) VALUES (?, 'grant', ?, ?, ?, ?)", [userId, amount, note ?? null, actor ?? null, now]);
      return row.credits;
    });
  }

  /** Removes credits (admin deduction); never below zero. */
  async deduct(userId: number, amount: number, now: number, note?: string, actor?: string): Promise<number> {
    if (!Number.isInteger(amount) || amount <= 0) throw new RangeError("deduct amount must be a positive integer");
    return this.sql.transaction(async (tx) => {
      const row = await tx.get<{ credits: number }>("UPDATE users SET credits = credits - ? WHERE id = ? AND credits >= ? RETURNING credits", [amount, userId, amount]);
      if (!row) throw new InsufficientCreditsError(`cannot deduct ${amount}: the balance is lower`);
      await tx.run("INSERT INTO ledger (user_id, kind, amount, note, actor, created_at) VALUES (?, 'deduct', ?, ?, ?, ?)", [userId, -amount, note ?? null, actor ?? null, now]);
      return row.credits;
    });
  }

  /**
   * Charges the request's price for an accepted image request: the request record (which keeps
   * what was charged, for the refund), the balance and the ledger row commit together or not at
   * all. Throws InsufficientCreditsError below the price, KeyCreditCapReached when the price
   * would take the API key past its credit cap, and TaskQueueFull when an async task's queue
   * bounds are reached. A price of 0 writes the request with nothing charged and no ledger row
   * (the ledger has no zero-amount rows).
   */
  async chargeForImage(c: ImageCharge, now: number): Promise<number> {
    if (!Number.isInteger(c.price) || c.price < 0) throw new RangeError("an image price must be a non-negative integer");
    return this.sql.transaction(async (tx) => {
      await checkKeyCap(tx, c.keyId, c.price);
      // The conditional update is the balance check, and (PostgreSQL) locks the user's row
      // for the rest of the transaction.
      const row = await tx.get<{ credits: number }>("UPDATE users SET credits = credits - ? WHERE id = ? AND credits >= ? RETURNING credits", [c.price, c.userId, c.price]);
      if (!row) {
        const balance = (await tx.get<{ credits: number }>("SELECT credits FROM users WHERE id = ?", [c.userId]))?.credits ?? 0;
        throw new InsufficientCreditsError("insufficient credits to generate an image", { price: c.price, balance });
      }
      await checkAsyncRoom(tx, c);
      await tx.run(
        `INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, prompt, created_at, owner)
         VALUES (?, ?, ?, 'image', ?, ?, 'pending', ?, ?, ?, ?)`,
        [c.requestId, c.userId, c.keyId, ENDPOINT_OF_KIND[c.kind], c.model, c.price, c.prompt, now, c.task?.status === "queued" ? null : this.owner],
      );
      if (c.price > 0) {
        await tx.run("INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (?, 'charge', ?, ?, ?)", [c.userId, -c.price, c.requestId, now]);
      }
      if (c.task) await insertTask(tx, c, now);
      if (c.idempotency) await claimIdempotencyKey(tx, c, now);
      return row.credits;
    });
  }

  /**
   * Marks a pending charged request failed and returns what it was charged (the request row's
   * credits_charged, never the model's current price), exactly once: the status transition
   * guards the refund (a conditional UPDATE … RETURNING, atomic on both engines), so a second
   * call (or a racing recovery, on this instance or another) changes nothing.
   * Returns true when this call refunded.
   */
  async refundOnce(requestId: string, failure: FailedOutcome, now: number, retry?: WriteAttempt): Promise<boolean> {
    return this.sql.transaction((tx) => refundPending(tx, requestId, failure, now, retry));
  }

  /**
   * refundOnce for a charge whose COMMIT may or may not have landed (its connection broke
   * around it): refunded once if it committed, nothing written if it did not. The user's row is
   * locked first: on PostgreSQL a charge still in flight (its COMMIT not yet processed) holds
   * that lock from its balance update until it ends, so this waits for it, and the request row
   * the refund then reads is the charge's final word. Without the wait, a COMMIT that reached
   * the server after this looked would leave the charge standing, with nobody left to refund it.
   */
  async refundLostCharge(charge: { requestId: string; userId: number }, failure: FailedOutcome, now: number, retry?: WriteAttempt): Promise<boolean> {
    return this.sql.transaction(async (tx) => {
      await tx.get(`SELECT id FROM users WHERE id = ?${forUpdate(tx)}`, [charge.userId]);
      return refundPending(tx, charge.requestId, failure, now, retry);
    });
  }

  /**
   * Requests a crash left pending: each is marked interrupted and refunded once (a task among
   * them fails, keeping its record for `taskRetentionMs`). Queued async tasks are not
   * interrupted: they run after the restart.
   */
  async recoverInterrupted(now: number, taskRetentionMs = 0): Promise<string[]> {
    const pending = await this.sql.all<{ id: string }>(
      "SELECT id FROM requests WHERE status = 'pending' AND id NOT IN (SELECT id FROM tasks WHERE status = 'queued')",
    );
    const refunded: string[] = [];
    for (const { id } of pending) if (await this.refundInterrupted(id, INTERRUPTED_MESSAGE, now, taskRetentionMs)) refunded.push(id);
    return refunded;
  }

  /**
   * Refunds one request that stopped with its instance (`reason` says how), once; a task among
   * them fails, keeping its record for `taskRetentionMs`. True when this call refunded it.
   */
  refundInterrupted(id: string, reason: string, now: number, taskRetentionMs = 0): Promise<boolean> {
    const task = {
      status: "failed" as const,
      error: { message: `The task was interrupted: ${reason}; its credit was refunded.`, type: "server_error", param: null, code: "interrupted" },
      expiresAt: now + taskRetentionMs,
    };
    return this.refundOnce(id, { status: "interrupted", errorCode: "interrupted", errorMessage: reason, task }, now);
  }

  async ledger(userId: number, limit = 50, offset = 0): Promise<LedgerRow[]> {
    return this.sql.all<LedgerRow>("SELECT * FROM ledger WHERE user_id = ? ORDER BY id DESC LIMIT ? OFFSET ?", [userId, limit, offset]);
  }

  async ledgerSum(userId: number): Promise<number> {
    return (await this.sql.get<{ s: number | null }>("SELECT CAST(SUM(amount) AS BIGINT) AS s FROM ledger WHERE user_id = ?", [userId]))?.s ?? 0;
  }
}
