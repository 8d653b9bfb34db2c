/**
 * Webhooks on SQLite: endpoints with their sealed secrets, deliveries and attempts (migration 4),
 * and the key that seals the secrets, kept in a file beside the database (never in it).
 */
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import type { Db } from "./database";
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
 * The 32-byte key sealing webhook secrets: data_dir/webhook-secrets.key (base64), created with
 * mode 0600 on first use. Exclusive creation, so two processes starting together agree on one
 * key. Back it up with the database: without it, the stored secrets cannot be opened and users
 * must rotate theirs.
 */
export function loadWebhookSecretKey(dataDir: string): Uint8Array {
  if (dataDir === ":memory:") return randomBytes(32);
  const path = join(dataDir, WEBHOOK_KEY_FILE);
  try {
    const fd = openSync(path, "wx", 0o600);
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

export class WebhookStore implements WebhookRecords {
  constructor(private readonly db: Db) {}

  endpoint(userId: number): WebhookEndpointRow | null {
    return this.db.query<WebhookEndpointRow, [number]>("SELECT * FROM webhook_endpoints WHERE user_id = ?").get(userId);
  }

  setEndpointUrl(userId: number, url: string | null, now: number): void {
    this.db.transaction(() => {
      this.db
        .query(
          `INSERT INTO webhook_endpoints (user_id, url, updated_at) VALUES (?1, ?2, ?3)
           ON CONFLICT (user_id) DO UPDATE SET url = ?2, updated_at = ?3`,
        )
        .run(userId, url, now);
      if (url === null) {
        this.db
          .query(
            `UPDATE webhook_deliveries SET state = 'failed', next_attempt_at = NULL, finished_at = ?2, last_error = ?3
              WHERE user_id = ?1 AND source IN ('endpoint', 'test') AND state = 'pending'`,
          )
          .run(userId, now, ENDPOINT_REMOVED);
      } else {
        // OR IGNORE: a pending delivery of the same event to the new URL (a request's own) already covers it.
        this.db
          .query("UPDATE OR IGNORE webhook_deliveries SET url = ?2 WHERE user_id = ?1 AND source IN ('endpoint', 'test') AND state = 'pending'")
          .run(userId, url);
      }
    }).immediate();
  }

  setSecret(userId: number, sealed: string, now: number): void {
    this.db
      .query(
        `INSERT INTO webhook_endpoints (user_id, secret_sealed, secret_created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
         ON CONFLICT (user_id) DO UPDATE SET secret_sealed = ?2, secret_created_at = ?3, updated_at = ?3`,
      )
      .run(userId, sealed, now);
  }

  enqueue(deliveries: NewDelivery[], now: number): number {
    const insert = this.db.query(
      `INSERT OR IGNORE INTO webhook_deliveries (event_id, user_id, event_type, source, url, payload, state, attempts, next_attempt_at, created_at)
       VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?)`,
    );
    return this.db
      .transaction(() => deliveries.reduce((n, d) => n + insert.run(d.eventId, d.userId, d.eventType, d.source, d.url, d.payload, now, now).changes, 0))
      .immediate();
  }

  claimDue(now: number, limit: number, leaseUntil: number): WebhookDeliveryRow[] {
    return this.db
      .query<WebhookDeliveryRow, [number, number, number]>(
        `UPDATE webhook_deliveries SET next_attempt_at = ?3
          WHERE id IN (SELECT id FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= ?1 ORDER BY next_attempt_at, id LIMIT ?2)
          RETURNING *`,
      )
      .all(now, limit, leaseUntil);
  }

  recordAttempt(deliveryId: number, attempt: AttemptRecord, outcome: AttemptOutcome): void {
    this.db.transaction(() => {
      this.db
        .query("INSERT INTO webhook_attempts (delivery_id, attempted_at, status, error, duration_ms) VALUES (?, ?, ?, ?, ?)")
        .run(deliveryId, attempt.at, attempt.status, attempt.error, Math.max(0, Math.round(attempt.durationMs)));
      const finishedAt = outcome.state === "pending" ? null : attempt.at + Math.max(0, Math.round(attempt.durationMs));
      const error = outcome.state === "failed" && outcome.reason ? outcome.reason : attempt.error;
      this.db
        .query(
          `UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = ?2, last_error = ?3, state = ?4, next_attempt_at = ?5, finished_at = ?6
            WHERE id = ?1 AND state = 'pending'`,
        )
        .run(deliveryId, attempt.status, error, outcome.state, outcome.state === "pending" ? outcome.nextAttemptAt : null, finishedAt);
    }).immediate();
  }

  nextDue(): number | null {
    return this.db.query<{ t: number | null }, []>("SELECT MIN(next_attempt_at) AS t FROM webhook_deliveries WHERE state = 'pending'").get()?.t ?? null;
  }

  recentDeliveries(userId: number, limit: number): WebhookDeliveryRow[] {
    return this.db.query<WebhookDeliveryRow, [number, number]>("SELECT * FROM webhook_deliveries WHERE user_id = ? ORDER BY id DESC LIMIT ?").all(userId, limit);
  }

  attemptsOf(deliveryIds: number[]): WebhookAttemptRow[] {
    if (deliveryIds.length === 0) return [];
    return this.db
      .query<WebhookAttemptRow, number[]>(`SELECT * FROM webhook_attempts WHERE delivery_id IN (${deliveryIds.map(() => "?").join(", ")}) ORDER BY id`)
      .all(...deliveryIds);
  }

  pruneFinished(before: number): number {
    return this.db
      .transaction(() => {
        this.db
          .query("DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE state != 'pending' AND finished_at < ?)")
          .run(before);
        return this.db.query("DELETE FROM webhook_deliveries WHERE state != 'pending' AND finished_at < ?").run(before).changes;
      })
      .immediate();
  }
}
