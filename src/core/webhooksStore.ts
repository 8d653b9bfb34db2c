/**
 * What webhooks need from storage (store/webhooks implements it): each user's endpoint and
 * sealed signing secret, the deliveries waiting or done, and every attempt made.
 */
import type { WebhookKeyCheckRecords } from "./webhooksKeyCheck";

export interface WebhookEndpointRow {
  user_id: number;
  /** null: no endpoint (a secret may still exist, for per-request webhook URLs). */
  url: string | null;
  /** The signing secret, sealed by SecretBox; never the secret itself. */
  secret_sealed: string | null;
  secret_created_at: number | null;
  /**
   * The secret the last rotation replaced, sealed the same way, and until when it still signs
   * beside the current one (ms); both null when there is none. Possibly past its expiry until
   * dropExpiredPreviousSecrets runs: readers compare the expiry with their clock.
   */
  previous_secret_sealed: string | null;
  previous_secret_expires_at: number | null;
  updated_at: number;
}

export type DeliveryState = "pending" | "delivered" | "failed";

/** Where a delivery goes: the user's endpoint, a request's own webhook_url, or a test from the workbench (to the endpoint). */
export type DeliverySource = "endpoint" | "request" | "test";

export interface WebhookDeliveryRow {
  id: number;
  /** `msg_…`, the webhook-id header: the same on every attempt. */
  event_id: string;
  user_id: number;
  event_type: string;
  source: DeliverySource;
  url: string;
  /** The JSON body exactly as it is signed and sent. */
  payload: string;
  state: DeliveryState;
  attempts: number;
  /** When the next attempt is due (ms); null once delivered or failed. */
  next_attempt_at: number | null;
  last_status: number | null;
  last_error: string | null;
  created_at: number;
  finished_at: number | null;
}

export interface WebhookAttemptRow {
  id: number;
  delivery_id: number;
  attempted_at: number;
  /** The HTTP status of the answer; null when there was none. */
  status: number | null;
  /** Why the attempt failed; null when it succeeded. */
  error: string | null;
  duration_ms: number;
}

export interface NewDelivery {
  eventId: string;
  userId: number;
  eventType: string;
  source: DeliverySource;
  url: string;
  payload: string;
}

export interface AttemptRecord {
  at: number;
  status: number | null;
  error: string | null;
  durationMs: number;
}

/** How a delivery goes on after an attempt. */
export type AttemptOutcome = { state: "delivered" } | { state: "pending"; nextAttemptAt: number } | { state: "failed"; reason?: string };

export interface WebhookRecords extends WebhookKeyCheckRecords {
  endpoint(userId: number): Promise<WebhookEndpointRow | null>;
  /**
   * Sets (or clears, with null) the endpoint URL. Pending deliveries to the endpoint follow it:
   * to the new URL, or failed ("the endpoint was removed") when it is cleared.
   */
  setEndpointUrl(userId: number, url: string | null, now: number): Promise<void>;
  /**
   * Makes `sealed` the user's signing secret, in one statement. The secret it replaces becomes
   * the previous one until `previousUntil`, or is dropped at once when that is null; either way
   * an earlier previous secret is gone (one previous at most).
   */
  rotateSecret(userId: number, sealed: string, now: number, previousUntil: number | null): Promise<void>;
  /** Drops the previous secrets whose expiry is at or before `now`, of one user or of everyone; returns how many. */
  dropExpiredPreviousSecrets(now: number, userId?: number): Promise<number>;
  /** Adds deliveries due at `now`, all or none; one per event and URL (a repeated event is ignored). Returns how many were new. */
  enqueue(deliveries: NewDelivery[], now: number): Promise<number>;
  /**
   * Takes up to `limit` due deliveries for an attempt: their next_attempt_at moves to
   * `leaseUntil`, so a crash during the attempt means it is made again after that (at least once).
   * Fair across users: round robin, and no user gets more than `perUser` (default `limit`)
   * counting the `held` deliveries (user id → count) the caller already has in flight.
   */
  claimDue(now: number, limit: number, leaseUntil: number, perUser?: number, held?: ReadonlyMap<number, number>): Promise<WebhookDeliveryRow[]>;
  /** How many test events of this user are still pending. */
  pendingTests(userId: number): Promise<number>;
  /** One attempt and its consequence, in one transaction. */
  recordAttempt(deliveryId: number, attempt: AttemptRecord, outcome: AttemptOutcome): Promise<void>;
  /** When the earliest pending delivery is due, or null. */
  nextDue(): Promise<number | null>;
  recentDeliveries(userId: number, limit: number): Promise<WebhookDeliveryRow[]>;
  attemptsOf(deliveryIds: number[]): Promise<WebhookAttemptRow[]>;
  /** Deletes delivered and failed deliveries (and their attempts) finished before `before`. */
  pruneFinished(before: number): Promise<number>;
  /**
   * Drops every stored signing secret (current and previous) and the key's check value, in one
   * transaction: the way out when the key that sealed them is lost. Returns the endpoints changed.
   */
  forgetSecrets(): Promise<number>;
}
