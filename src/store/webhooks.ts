/**
 * Webhooks in the database: endpoints with their sealed secrets, deliveries and attempts (migration 4;
 * a rotation's previous secret, migration 20), and the key that seals the secrets, kept in a file
 * beside the database (never in it).
 */
import { closeSync, existsSync, openSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { forUpdate, type SqlClient } from "./sql";
import { PRIVATE_FILE } from "./privateFiles";
import { ServerSecretStore } from "./serverSecrets";
import { ENDPOINT_REMOVED } from "../core/webhooksAttemptError";
import type {
  AttemptOutcome,
  AttemptRecord,
  NewDelivery,
  WebhookAttemptRow,
  WebhookDeliveryRow,
  WebhookEndpointRow,
  WebhookRecords,
} from "../core/webhooksStore";

export type { WebhookAttemptRow, WebhookDeliveryRow, WebhookEndpointRow } from "../core/webhooksStore";

export const WEBHOOK_KEY_FILE = "webhook-secrets.key";

/**
 * The server_secrets row holding the check value of the key that sealed the webhook secrets
 * (core/webhooksKeyCheck): not a secret itself, but one value per database made by the server,
 * as the other rows of that table are.
 */
const KEY_CHECK_NAME = "webhook_key_check";

/**
 * The 32-byte key sealing webhook secrets: data_dir/webhook-secrets.key (base64), created with
 * mode 0600 on first use. Exclusive creation, so two processes starting together agree on one
 * key. Back it up with the database: without it, the stored secrets cannot be opened and users
 * must rotate theirs.
 */
export function loadWebhookSecretKey(dataDir: string): Uint8Array {
  if (dataDir === ":memory:") return randomBytes(32);
  const path = join(dataDir, WEBHOOK_KEY_FILE);
  try {
    const fd = openSync(path, "wx", PRIVATE_FILE);
    try {
      const key = randomBytes(32);
      writeSync(fd, `${key.toString("base64")}\n`);
      return key;
    } finally {
      closeSync(fd);
    }
  } catch (e) {
    if ((e as { code?: string }).code !== "EEXIST") throw e;
  }
  const key = Buffer.from(readFileSync(path, "utf8").trim(), "base64");
  if (key.length !== 32) throw new Error(`${path}: expected the base64 of 32 bytes`);
  return key;
}

/** Whether loadWebhookSecretKey would read a key rather than make one (an in-memory data_dir makes none). */
export function webhookSecretKeyExists(dataDir: string): boolean {
  return dataDir === ":memory:" || existsSync(join(dataDir, WEBHOOK_KEY_FILE));
}

/**
 * Below this many due deliveries a claim ranks them all (cheap at that size); from it on, it
 * walks the users instead (claimDue): ranking 512 rows costs about 1 ms on SQLite, walking costs
 * a seek for every user with a pending delivery.
 */
export const FEW_DUE_DELIVERIES = 512;

/**
 * WebhookStore.claimDue by ranking every due row at once (a window over them: its cost grows
 * with them, so only for a few): the same rows, turns and lease as the walk over users, the same
 * locking. The claim was this alone before migration 21 (bench/webhook-claim.ts measures it as
 * the baseline).
 */
export function rankedClaim(sql: SqlClient, now: number, limit: number, leaseUntil: number, perUser: number, held: ReadonlyMap<number, number>): Promise<WebhookDeliveryRow[]> {
  const skipLocked = sql.dialect === "postgres" ? " FOR UPDATE SKIP LOCKED" : "";
  const heldUsers = [...held].filter(([, n]) => n > 0);
  const heldSql = heldUsers.length === 0 ? "" : ` + CASE user_id${" WHEN ? THEN ?".repeat(heldUsers.length)} ELSE 0 END`;
  return sql.all<WebhookDeliveryRow>(
    `WITH ranked AS MATERIALIZED (
       SELECT id, next_attempt_at AS due_at, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY next_attempt_at, id)${heldSql} AS turn
         FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= ?),
     due AS MATERIALIZED (
       SELECT id FROM webhook_deliveries WHERE id IN (SELECT id FROM ranked WHERE turn <= ? ORDER BY turn, due_at, id LIMIT ?)${skipLocked})
     UPDATE webhook_deliveries SET next_attempt_at = ?
      WHERE state = 'pending' AND next_attempt_at <= ? AND id IN (SELECT id FROM due)
      RETURNING *`,
    [...heldUsers.flat(), now, perUser, limit, leaseUntil, now],
  );
}

export class WebhookStore implements WebhookRecords {
  constructor(
    private readonly sql: SqlClient,
    /** FEW_DUE_DELIVERIES; tests give 1 (always the walk) or more than any backlog (always the ranking). */
    private readonly fewDue = FEW_DUE_DELIVERIES,
  ) {}

  endpoint(userId: number): Promise<WebhookEndpointRow | null> {
    return this.sql.get<WebhookEndpointRow>("SELECT * FROM webhook_endpoints WHERE user_id = ?", [userId]);
  }

  async setEndpointUrl(userId: number, url: string | null, now: number): Promise<void> {
    await this.sql.transaction(async (tx) => {
      await tx.run(
        `INSERT INTO webhook_endpoints (user_id, url, updated_at) VALUES (?, ?, ?)
         ON CONFLICT (user_id) DO UPDATE SET url = excluded.url, updated_at = excluded.updated_at`,
        [userId, url, now],
      );
      if (url === null) {
        await tx.run(
          `UPDATE webhook_deliveries SET state = 'failed', next_attempt_at = NULL, finished_at = ?, last_error = ?
            WHERE user_id = ? AND source IN ('endpoint', 'test') AND state = 'pending'`,
          [now, ENDPOINT_REMOVED, userId],
        );
        return;
      }
      // Each pending delivery follows the endpoint, unless one of the same event to the new URL
      // (a request's own) already covers it: one row at a time, so two of one event never collide.
      const pending = await tx.all<{ id: number }>(
        `SELECT id FROM webhook_deliveries WHERE user_id = ? AND source IN ('endpoint', 'test') AND state = 'pending' ORDER BY id${forUpdate(tx)}`,
        [userId],
      );
      for (const { id } of pending) {
        await tx.run(
          `UPDATE webhook_deliveries SET url = ? WHERE id = ? AND NOT EXISTS (
             SELECT 1 FROM webhook_deliveries same WHERE same.event_id = webhook_deliveries.event_id AND same.url = ?)`,
          [url, id, url],
        );
      }
    });
  }

  async rotateSecret(userId: number, sealed: string, now: number, previousUntil: number | null): Promise<void> {
    // The SET expressions read the row as it was, so the secret being replaced moves to
    // previous_secret_sealed in the same statement that replaces it: two rotations at once
    // serialise on the row and neither loses the other's secret half-way. A row without a
    // secret yet (the endpoint saved first) has nothing to keep.
    const keepPrevious =
      previousUntil === null
        ? "previous_secret_sealed = NULL, previous_secret_expires_at = NULL"
        : `previous_secret_sealed = webhook_endpoints.secret_sealed,
           previous_secret_expires_at = CASE WHEN webhook_endpoints.secret_sealed IS NULL THEN NULL ELSE CAST(? AS BIGINT) END`;
    await this.sql.run(
      `INSERT INTO webhook_endpoints (user_id, secret_sealed, secret_created_at, updated_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (user_id) DO UPDATE SET ${keepPrevious},
         secret_sealed = excluded.secret_sealed, secret_created_at = excluded.secret_created_at, updated_at = excluded.updated_at`,
      previousUntil === null ? [userId, sealed, now, now] : [userId, sealed, now, now, previousUntil],
    );
  }

  async dropExpiredPreviousSecrets(now: number, userId?: number): Promise<number> {
    const oneUser = userId === undefined ? "" : " AND user_id = ?";
    const { changes } = await this.sql.run(
      `UPDATE webhook_endpoints SET previous_secret_sealed = NULL, previous_secret_expires_at = NULL WHERE previous_secret_expires_at <= ?${oneUser}`,
      userId === undefined ? [now] : [now, userId],
    );
    return changes;
  }

  keyCheck(): Promise<Uint8Array | null> {
    return new ServerSecretStore(this.sql).read(KEY_CHECK_NAME);
  }

  claimKeyCheck(value: Uint8Array, now: number): Promise<Uint8Array> {
    return new ServerSecretStore(this.sql).claim(KEY_CHECK_NAME, value, now);
  }

  async anySealedSecret(): Promise<{ userId: number; sealed: string } | null> {
    const row = await this.sql.get<{ user_id: number; sealed: string }>(
      `SELECT user_id, COALESCE(secret_sealed, previous_secret_sealed) AS sealed FROM webhook_endpoints
        WHERE secret_sealed IS NOT NULL OR previous_secret_sealed IS NOT NULL LIMIT 1`,
    );
    return row ? { userId: Number(row.user_id), sealed: row.sealed } : null;
  }

  forgetSecrets(): Promise<number> {
    return this.sql.transaction(async (tx) => {
      const { changes } = await tx.run(
        `UPDATE webhook_endpoints SET secret_sealed = NULL, secret_created_at = NULL, previous_secret_sealed = NULL, previous_secret_expires_at = NULL
          WHERE secret_sealed IS NOT NULL OR previous_secret_sealed IS NOT NULL`,
      );
      await new ServerSecretStore(tx).remove(KEY_CHECK_NAME);
      return changes;
    });
  }

  enqueue(deliveries: NewDelivery[], now: number): Promise<number> {
    return this.sql.transaction(async (tx) => {
      let added = 0;
      for (const d of deliveries) {
        const { changes } = await tx.run(
          `INSERT INTO webhook_deliveries (event_id, user_id, event_type, source, url, payload, state, attempts, next_attempt_at, created_at)
           VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT (event_id, url) DO NOTHING`,
          [d.eventId, d.userId, d.eventType, d.source, d.url, d.payload, now, now],
        );
        added += changes;
      }
      return added;
    });
  }

  async claimDue(now: number, limit: number, leaseUntil: number, perUser = limit, held: ReadonlyMap<number, number> = new Map()): Promise<WebhookDeliveryRow[]> {
    // First, how many rows are due, counted through the due-time index up to FEW_DUE_DELIVERIES:
    // none (the usual look, after each event and attempt and every poll) reads nothing more;
    // a few are ranked all at once (rankedClaim), which costs about those rows; only a large
    // backlog is claimed by walking the users (below), which costs a seek for every user with a
    // pending delivery, due or not (26 ms for 20 000 users' retries on SQLite, where ranking
    // the one row due among them costs next to nothing).
    const counted = await this.sql.get<{ n: number | string }>(
      "SELECT COUNT(*) AS n FROM (SELECT 1 FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= ? LIMIT ?) AS due",
      [now, this.fewDue],
    );
    const dueRows = Number(counted?.n ?? 0);
    if (dueRows === 0) return [];
    if (dueRows < this.fewDue) return rankedClaim(this.sql, now, limit, leaseUntil, perUser, held);
    // Round robin across users: each due row gets its turn within its user (1 for the oldest,
    // then 2, …), counted after the deliveries this instance already has in flight for that
    // user (`held`), and rows are taken by turn, so every user's first goes before anyone's
    // second; a turn past `perUser` is not taken at all, so one user's backlog (or a hanging
    // receiver) holds at most perUser slots and the others stay free for everyone else.
    //
    // Bounded by the users, not the backlog: this runs on the serving thread on SQLite, and a
    // receiver that is down can have a hundred thousand deliveries waiting. From the index
    // webhook_deliveries_user_due (migration 21: pending rows by user, then due time and id),
    // `pending_users` walks the users with pending deliveries, one seek each (a loose index
    // scan: the next user after the last; a user whose rows are all retries not yet due costs
    // that seek, as no index finds the next user with a due row without reading the others);
    // `candidates` reads each one's oldest due rows, no more than a claim could take of them
    // (perUser, and never more than `limit`), skipping a user who already holds perUser; only
    // those few rows are ranked and sorted. PostgreSQL reads them with LATERAL; SQLite has no
    // LATERAL, but runs a correlated `IN (… LIMIT)` once per user through the same index, and
    // there the table keeps its own name, so its query plan names every read of it (the test
    // of the plan looks for them).
    //
    // The CTEs are MATERIALIZED so each runs once: PostgreSQL would otherwise run an
    // `id IN (SELECT … LIMIT)` again for every row it joins. PostgreSQL allows no FOR UPDATE
    // beside a window function, so the rows are locked in a second step; SKIP LOCKED leaves
    // rows another instance is claiming to it, and the outer WHERE repeats the due test, so a
    // row whose lock this claim waited for is taken only if still due. SQLite's write lock
    // serialises claims.
    const postgres = this.sql.dialect === "postgres";
    const skipLocked = postgres ? " FOR UPDATE SKIP LOCKED" : "";
    const heldUsers = [...held].filter(([, n]) => n > 0);
    const heldSql = heldUsers.length === 0 ? "0" : `CASE user_id${" WHEN ? THEN ?".repeat(heldUsers.length)} ELSE 0 END`;
    const oldestDue = (columns: string) => `SELECT ${columns} FROM webhook_deliveries
        WHERE state = 'pending' AND user_id = held.user_id AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?`;
    const [eachUsersOldest, row] = postgres
      ? [`held CROSS JOIN LATERAL (${oldestDue("id, user_id, next_attempt_at")}) AS oldest`, "oldest"]
      : [`held JOIN webhook_deliveries ON webhook_deliveries.id IN (${oldestDue("id")})`, "webhook_deliveries"];
    return this.sql.all<WebhookDeliveryRow>(
      `WITH RECURSIVE pending_users (user_id) AS (
         SELECT MIN(user_id) FROM webhook_deliveries WHERE state = 'pending'
         UNION ALL
         SELECT (SELECT MIN(webhook_deliveries.user_id) FROM webhook_deliveries WHERE state = 'pending' AND webhook_deliveries.user_id > pending_users.user_id)
           FROM pending_users WHERE user_id IS NOT NULL),
       held AS MATERIALIZED (
         SELECT user_id, ${heldSql} AS n FROM pending_users WHERE user_id IS NOT NULL),
       candidates AS MATERIALIZED (
         SELECT ${row}.id, ${row}.next_attempt_at AS due_at, ROW_NUMBER() OVER (PARTITION BY ${row}.user_id ORDER BY ${row}.next_attempt_at, ${row}.id) + held.n AS turn
           FROM ${eachUsersOldest}
          WHERE held.n < ?),
       due AS MATERIALIZED (
         SELECT id FROM webhook_deliveries WHERE id IN (SELECT id FROM candidates WHERE turn <= ? ORDER BY turn, due_at, id LIMIT ?)${skipLocked})
       UPDATE webhook_deliveries SET next_attempt_at = ?
        WHERE state = 'pending' AND next_attempt_at <= ? AND id IN (SELECT id FROM due)
        RETURNING *`,
      [...heldUsers.flat(), now, Math.max(0, Math.min(perUser, limit)), perUser, perUser, limit, leaseUntil, now],
    );
  }

  /** Test events of this user not yet delivered or given up. */
  async pendingTests(userId: number): Promise<number> {
    const row = await this.sql.get<{ n: number }>("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE user_id = ? AND source = 'test' AND state = 'pending'", [userId]);
    return Number(row?.n ?? 0);
  }

  async recordAttempt(deliveryId: number, attempt: AttemptRecord, outcome: AttemptOutcome): Promise<void> {
    const durationMs = Math.max(0, Math.round(attempt.durationMs));
    const finishedAt = outcome.state === "pending" ? null : attempt.at + durationMs;
    const error = outcome.state === "failed" && outcome.reason ? outcome.reason : attempt.error;
    await this.sql.transaction(async (tx) => {
      await tx.run("INSERT INTO webhook_attempts (delivery_id, attempted_at, status, error, duration_ms) VALUES (?, ?, ?, ?, ?)", [
        deliveryId,
        attempt.at,
        attempt.status,
        attempt.error,
        durationMs,
      ]);
      await tx.run(
        `UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = ?, last_error = ?, state = ?, next_attempt_at = ?, finished_at = ?
          WHERE id = ? AND state = 'pending'`,
        [attempt.status, error, outcome.state, outcome.state === "pending" ? outcome.nextAttemptAt : null, finishedAt, deliveryId],
      );
    });
  }

  async nextDue(): Promise<number | null> {
    return (await this.sql.get<{ t: number | null }>("SELECT MIN(next_attempt_at) AS t FROM webhook_deliveries WHERE state = 'pending'"))?.t ?? null;
  }

  recentDeliveries(userId: number, limit: number): Promise<WebhookDeliveryRow[]> {
    return this.sql.all<WebhookDeliveryRow>("SELECT * FROM webhook_deliveries WHERE user_id = ? ORDER BY id DESC LIMIT ?", [userId, limit]);
  }

  async attemptsOf(deliveryIds: number[]): Promise<WebhookAttemptRow[]> {
    if (deliveryIds.length === 0) return [];
    return this.sql.all<WebhookAttemptRow>(`SELECT * FROM webhook_attempts WHERE delivery_id IN (${deliveryIds.map(() => "?").join(", ")}) ORDER BY id`, deliveryIds);
  }

  pruneFinished(before: number): Promise<number> {
    return this.sql.transaction(async (tx) => {
      await tx.run("DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE state != 'pending' AND finished_at < ?)", [before]);
      return (await tx.run("DELETE FROM webhook_deliveries WHERE state != 'pending' AND finished_at < ?", [before])).changes;
    });
  }
}
