/**
 * Every balance change lives here, each inside one IMMEDIATE transaction together with its
 * ledger row (and, for images, the request record). The schema backs this up: credits >= 0,
 * refunded <= charged, and at most one charge and one refund row per request.
 */
import type { Db } from "./database";
import { KEY_SPEND_SQL } from "./apiKeys";
import { IdempotencyKeyTaken, InsufficientCreditsError, KeyCreditCapReached, type CreditLedger, type FailedOutcome, type ImageCharge, type LedgerRow } from "../core/store";

export { InsufficientCreditsError } from "../core/store";
export type { ImageCharge, LedgerRow } from "../core/store";

/** The task row of a charged request (and its stored inputs), inside the charge's transaction. */
function insertTask(db: Db, c: ImageCharge, now: number): void {
  const t = c.task!;
  db.query(
    `INSERT INTO tasks (id, user_id, mode, status, endpoint, model, job, webhook_url, created_at, started_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  ).run(c.requestId, c.userId, t.mode, t.status, t.endpoint, t.model, t.job ? JSON.stringify(t.job) : null, t.webhookUrl ?? null, now, t.status === "running" ? now : null);
  const insert = db.query("INSERT INTO task_inputs (task_id, position, role, param, mime, width, height, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  (t.inputs ?? []).forEach((input, i) => insert.run(c.requestId, i, input.role, input.param, input.mime, input.width, input.height, input.bytes));
}

/**
 * Claims the Idempotency-Key for this request. A key still answering for a live or succeeded
 * request is not taken over (IdempotencyKeyTaken rolls the whole charge back); an expired one,
 * or one whose request failed and was refunded, is.
 */
function claimIdempotencyKey(db: Db, c: ImageCharge, now: number): void {
  const k = c.idempotency!;
  const claimed = db
    .query(
      `INSERT INTO idempotency_keys (user_id, key, fingerprint, request_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (user_id, key) DO UPDATE SET fingerprint = excluded.fingerprint, request_id = excluded.request_id,
              created_at = excluded.created_at, expires_at = excluded.expires_at
        WHERE idempotency_keys.expires_at <= ?
           OR (SELECT status FROM requests WHERE id = idempotency_keys.request_id) IN ('failed', 'interrupted')`,
    )
    .run(c.userId, k.key, k.fingerprint, c.requestId, now, k.expiresAt, now);
  if (claimed.changes !== 1) throw new IdempotencyKeyTaken(`the Idempotency-Key is held by another request`);
}

/** The history's endpoint column keeps the route each kind of image request came in on. */
const ENDPOINT_OF_KIND: Record<ImageCharge["kind"], string> = { generate: "/v1/images/generations", edit: "/v1/images/edits" };

/**
 * Refuses a charge that would take the key past its credit cap. Runs inside the charge's
 * IMMEDIATE transaction: the write lock serialises charges, so two requests at cap − 1 cannot
 * both pass.
 */
function checkKeyCap(db: Db, keyId: number | null, cost: number): void {
  if (keyId === null) return;
  const cap = db.query<{ credit_cap: number | null }, [number]>("SELECT credit_cap FROM api_keys WHERE id = ?").get(keyId)?.credit_cap ?? null;
  if (cap === null) return;
  const spent = db.query<{ spent: number }, [number]>(KEY_SPEND_SQL).get(keyId)?.spent ?? 0;
  if (spent + cost > cap) throw new KeyCreditCapReached(cap);
}

export class CreditStore implements CreditLedger {
  constructor(private readonly db: Db) {}

  balance(userId: number): number | null {
    return this.db.query<{ credits: number }, [number]>("SELECT credits FROM users WHERE id = ?").get(userId)?.credits ?? null;
  }

  /**
   * Users whose balance differs from the sum of their ledger rows: must always be 0. One pass
   * over the ledger (grouped), joined to the users table.
   */
  ledgerMismatches(): number {
    return (
      this.db
        .query<{ n: number }, []>(
          `SELECT COUNT(*) AS n FROM users u LEFT JOIN (SELECT user_id, SUM(amount) AS total FROM ledger GROUP BY user_id) l ON l.user_id = u.id
            WHERE u.credits != COALESCE(l.total, 0)`,
        )
        .get()?.n ?? 0
    );
  }

  /** The ledger's credits by kind in rows after `afterId` (as positive amounts), and the last row id seen. */
  ledgerTotalsSince(afterId: number): { lastId: number; byKind: Map<LedgerRow["kind"], number> } {
    const rows = this.db
      .query<{ kind: LedgerRow["kind"]; total: number; last: number }, [number]>(
        "SELECT kind, SUM(ABS(amount)) AS total, MAX(id) AS last FROM ledger WHERE id > ? GROUP BY kind",
      )
      .all(afterId);
    return { lastId: rows.reduce((m, r) => Math.max(m, r.last), afterId), byKind: new Map(rows.map((r) => [r.kind, r.total])) };
  }

  /** Adds credits (admin grant). */
  grant(userId: number, amount: number, now: number, note?: string, actor?: string): number {
    if (!Number.isInteger(amount) || amount <= 0) throw new RangeError("grant amount must be a positive integer");
    return this.db.transaction(() => {
      const row = this.db
        .query<{ credits: number }, [number, number]>("UPDATE users SET credits = credits + ? WHERE id = ? RETURNING credits")
        .get(amount, userId);
      if (!row) throw new RangeError(`no user with id ${userId}`);
      this.db
        .query("INSERT INTO ledger (user_id, kind, amount, note, actor, created_at) VALUES (?, 'grant', ?, ?, ?, ?)")
        .run(userId, amount, note ?? null, actor ?? null, now);
      return row.credits;
    }).immediate();
  }

  /** Removes credits (admin deduction); never below zero. */
  deduct(userId: number, amount: number, now: number, note?: string, actor?: string): number {
    if (!Number.isInteger(amount) || amount <= 0) throw new RangeError("deduct amount must be a positive integer");
    return this.db.transaction(() => {
      const row = this.db
        .query<{ credits: number }, [number, number, number]>(
          "UPDATE users SET credits = credits - ? WHERE id = ? AND credits >= ? RETURNING credits",
        )
        .get(amount, userId, amount);
      if (!row) throw new InsufficientCreditsError(`cannot deduct ${amount}: the balance is lower`);
      this.db
        .query("INSERT INTO ledger (user_id, kind, amount, note, actor, created_at) VALUES (?, 'deduct', ?, ?, ?, ?)")
        .run(userId, -amount, note ?? null, actor ?? null, now);
      return row.credits;
    }).immediate();
  }

  /**
   * Charges the request's price for an accepted image request: the request record (which keeps
   * what was charged, for the refund), the balance and the ledger row commit together or not at
   * all. Throws InsufficientCreditsError below the price, and KeyCreditCapReached when the
   * price would take the API key past its credit cap. A price of 0 writes the request with
   * nothing charged and no ledger row (the ledger has no zero-amount rows).
   */
  chargeForImage(c: ImageCharge, now: number): number {
    if (!Number.isInteger(c.price) || c.price < 0) throw new RangeError("an image price must be a non-negative integer");
    return this.db.transaction(() => {
      checkKeyCap(this.db, c.keyId, c.price);
      const row = this.db
        .query<{ credits: number }, [number, number, number]>("UPDATE users SET credits = credits - ? WHERE id = ? AND credits >= ? RETURNING credits")
        .get(c.price, c.userId, c.price);
      if (!row) throw new InsufficientCreditsError("insufficient credits to generate an image", { price: c.price, balance: this.balance(c.userId) ?? 0 });
      this.db
        .query(
          `INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, prompt, created_at)
           VALUES (?, ?, ?, 'image', ?, ?, 'pending', ?, ?, ?)`,
        )
        .run(c.requestId, c.userId, c.keyId, ENDPOINT_OF_KIND[c.kind], c.model, c.price, c.prompt, now);
      if (c.price > 0) {
        this.db
          .query("INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (?, 'charge', ?, ?, ?)")
          .run(c.userId, -c.price, c.requestId, now);
      }
      if (c.task) insertTask(this.db, c, now);
      if (c.idempotency) claimIdempotencyKey(this.db, c, now);
      return row.credits;
    }).immediate();
  }

  /**
   * Marks a pending charged request failed and returns what it was charged (the request row's
   * credits_charged, never the model's current price), exactly once: the status transition
   * guards the refund, so a second call (or a racing recovery) changes nothing.
   * Returns true when this call refunded.
   */
  refundOnce(requestId: string, failure: FailedOutcome, now: number): boolean {
    return this.db.transaction(() => {
      const req = this.db
        .query<{ user_id: number; credits_charged: number }, [string, string, string, string | null, number | null, number | null, number, string]>(
          `UPDATE requests SET status = ?, error_code = ?, error_message = ?, error_detail = ?, queue_ms = COALESCE(?, queue_ms),
                  generation_ms = COALESCE(?, generation_ms), credits_refunded = credits_charged, finished_at = ?
            WHERE id = ? AND status = 'pending' RETURNING user_id, credits_charged`,
        )
        .get(failure.status, failure.errorCode, failure.errorMessage, failure.errorDetail ?? null, failure.queueMs ?? null, failure.generationMs ?? null, now, requestId);
      if (!req) return false;
      if (failure.task) {
        this.db
          .query("UPDATE tasks SET status = ?, error = ?, finished_at = ?, expires_at = ? WHERE id = ? AND status IN ('queued', 'running')")
          .run(failure.task.status, JSON.stringify(failure.task.error), now, failure.task.expiresAt, requestId);
      }
      this.db.query("DELETE FROM task_inputs WHERE task_id = ?").run(requestId);
      if (req.credits_charged > 0) {
        this.db.query("UPDATE users SET credits = credits + ? WHERE id = ?").run(req.credits_charged, req.user_id);
        this.db
          .query("INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (?, 'refund', ?, ?, ?)")
          .run(req.user_id, req.credits_charged, requestId, now);
      }
      return true;
    }).immediate();
  }

  /**
   * Requests a crash left pending: each is marked interrupted and refunded once (a task among
   * them fails, keeping its record for `taskRetentionMs`). Queued async tasks are not
   * interrupted: they run after the restart.
   */
  recoverInterrupted(now: number, taskRetentionMs = 0): string[] {
    const pending = this.db
      .query<{ id: string }, []>("SELECT id FROM requests WHERE status = 'pending' AND id NOT IN (SELECT id FROM tasks WHERE status = 'queued')")
      .all();
    const refunded: string[] = [];
    const message = "the server stopped before the request finished";
    for (const { id } of pending) {
      const task = { status: "failed" as const, error: { message: `The task was interrupted: ${message}; its credit was refunded.`, type: "server_error", param: null, code: "interrupted" }, expiresAt: now + taskRetentionMs };
      if (this.refundOnce(id, { status: "interrupted", errorCode: "interrupted", errorMessage: message, task }, now)) refunded.push(id);
    }
    return refunded;
  }

  ledger(userId: number, limit = 50, offset = 0): LedgerRow[] {
    return this.db
      .query<LedgerRow, [number, number, number]>("SELECT * FROM ledger WHERE user_id = ? ORDER BY id DESC LIMIT ? OFFSET ?")
      .all(userId, limit, offset);
  }

  ledgerSum(userId: number): number {
    return this.db.query<{ s: number | null }, [number]>("SELECT SUM(amount) AS s FROM ledger WHERE user_id = ?").get(userId)?.s ?? 0;
  }
}
