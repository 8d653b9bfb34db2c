/**
 * The store ports: what the domain needs from storage, as records, errors and narrow
 * interfaces. store/ implements them on SQLite today; a second backend implements the same.
 * No SQL here, and nothing from store/: dependencies point from store to core.
 */

export type Role = "user" | "admin";

export interface UserRow {
  id: number;
  email: string;
  password_hash: string | null;
  role: Role;
  credits: number;
  disabled: number;
  created_at: number;
}

export interface ApiKeyRow {
  id: number;
  user_id: number;
  name: string;
  prefix: string;
  secret_hash: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

/** What authentication needs: the key and its owner, in one query. */
export interface KeyOwner {
  key_id: number;
  key_revoked_at: number | null;
  user_id: number;
  email: string;
  role: Role;
  disabled: number;
}

export interface LedgerRow {
  id: number;
  user_id: number;
  kind: "grant" | "deduct" | "charge" | "refund";
  amount: number;
  request_id: string | null;
  note: string | null;
  actor: string | null;
  created_at: number;
}

/** The charge of one image request: its ledger row and its pending request record, together. */
export interface ImageCharge {
  requestId: string;
  userId: number;
  keyId: number | null;
  kind: "generate" | "edit";
  model: string;
  prompt: string;
}

/** How a charged request ended when it did not succeed (recorded with its refund). */
export interface FailedOutcome {
  status: "failed" | "interrupted";
  errorCode: string;
  errorMessage: string;
  queueMs?: number | null;
  generationMs?: number | null;
}

/** Which upstream account served a request, as the history keeps it (every field optional). */
export interface TraceFields {
  upstreamId?: string | null;
  accountId?: string | null;
  attempts?: number | null;
  upstreamLatencyMs?: number | null;
}

export interface ChatRecord extends TraceFields {
  id: string;
  userId: number;
  keyId: number | null;
  model: string;
  status: "succeeded" | "failed";
  promptTokens?: number | null;
  completionTokens?: number | null;
  generationMs?: number | null;
  queueMs?: number | null;
  errorCode?: string | null;
  errorMessage?: string | null;
  prompt?: string | null;
}

/** The balance is below the cost; nothing was written. No `code` property (see http/errors). */
export class InsufficientCreditsError extends Error {
  override name = "InsufficientCreditsError";
}

export class EmailTakenError extends Error {
  override name = "EmailTakenError";
}

/**
 * Another process held the store's write lock for the whole wait; nothing was written. No
 * `code` property on purpose (Elysia's onError would not see it as this class).
 */
export class DatabaseBusyError extends Error {
  override name = "DatabaseBusyError";
  constructor(readonly waitedMs: number) {
    super(`the database stayed locked by another process for ${Math.round(waitedMs)} ms`);
  }
}

/** Credits: every change in one transaction with its ledger row. */
export interface CreditLedger {
  balance(userId: number): number | null;
  /** −1 credit, a charge row and a pending request, all or nothing; InsufficientCreditsError at 0. */
  chargeForImage(charge: ImageCharge, now: number): unknown;
  /** The refund happens at most once per request, whoever asks; true if this call made it. */
  refundOnce(requestId: string, outcome: FailedOutcome, now: number): boolean;
}

export interface RequestLog {
  /** pending → succeeded; false when the request was no longer pending. */
  markSucceeded(id: string, outcome: { queueMs: number; generationMs: number } & TraceFields, now: number): boolean;
  recordTrace(id: string, trace: TraceFields): void;
  recordChat(record: ChatRecord, now: number): void;
}

/** What the image and chat flows need from storage. */
export interface FlowStore {
  credits: CreditLedger;
  requests: RequestLog;
  /**
   * Runs one write (a transaction, all or nothing), retrying without blocking the event loop
   * while another process holds the write lock; DatabaseBusyError after maxWaitMs (Infinity
   * retries until it lands).
   */
  whenWritable<T>(write: () => T, opts: { maxWaitMs: number }): Promise<T>;
}

/** What accounts (users and API keys) need from storage. */
export interface AccountStore {
  users: { create(input: { email: string; passwordHash: string | null; role: Role; credits: number; note?: string; actor?: string }, now: number): UserRow };
  keys: {
    create(input: { userId: number; name: string; prefix: string; secretHash: string }, now: number): ApiKeyRow;
    ownerByHash(secretHash: string): KeyOwner | null;
    /** last_used_at is a hint: false when the store was locked and nothing was written. */
    touch(keyId: number, now: number): boolean;
  };
}

// ---- upstream account pools ------------------------------------------------------------------

export type AttemptFailureKind = "rate_limited" | "auth" | "rejected" | "failed" | "timeout";

export interface DisabledInfo {
  reason: string;
  at: number;
}

/** One failed attempt on an account, as the pool remembers it. */
export interface AccountFailure {
  at: number;
  kind: AttemptFailureKind;
  message: string;
}

export type AccountHealth = "healthy" | "cooling" | "probing" | "disabled";

/** What `atelier upstreams` and the admin route show for one account. */
export interface AccountSnapshot {
  upstreamId: string;
  accountId: string;
  weight: number;
  capacity: number;
  inFlight: number;
  state: AccountHealth;
  coolingUntil: number | null;
  disabledReason: string | null;
  disabledAt: number | null;
  consecutiveFailures: number;
  recentFailures: AccountFailure[];
}

/** Persistence the upstream account pool (engines/pool) needs; store/upstreams implements it. */
export interface PoolStateStore {
  disabledAccounts(upstreamId: string): Map<string, DisabledInfo>;
  disableAccount(upstreamId: string, accountId: string, reason: string, at: number): void;
  /** Latest in-memory state, for the CLI in another process (written throttled). */
  saveSnapshot(upstreamId: string, accounts: AccountSnapshot[], at: number): void;
}
