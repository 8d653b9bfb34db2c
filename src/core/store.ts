/**
 * The store ports: what the domain needs from storage, as records, errors and narrow
 * interfaces. store/ implements them on SQLite today; a second backend implements the same.
 * No SQL here, and nothing from store/: dependencies point from store to core.
 */
import type { ErrorBody } from "./errorBody";
import type { KeyLimits } from "./keyLimits";

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
  /** After this time (ms) the key answers 401 `api_key_expired`; null: never. */
  expires_at: number | null;
  /** The key stops once it has spent this many credits (charged minus refunded); null: no cap. */
  credit_cap: number | null;
  /** JSON array of the model ids the key may use; null: every model. */
  allowed_models: string | null;
}

/** What authentication needs: the key and its owner, in one query. */
export interface KeyOwner {
  key_id: number;
  /** The key's display prefix (`sk-atl-` + 8 characters), safe to log. */
  key_prefix: string;
  key_revoked_at: number | null;
  user_id: number;
  email: string;
  role: Role;
  disabled: number;
  key_name: string;
  key_created_at: number;
  key_expires_at: number | null;
  key_credit_cap: number | null;
  /** JSON array of model ids, or null for every model. */
  key_allowed_models: string | null;
}

export interface LedgerRow {
  id: number;
  user_id: number;
  kind: "grant" | "deduct" | "charge" | "refund" | "redeem";
  amount: number;
  request_id: string | null;
  note: string | null;
  actor: string | null;
  created_at: number;
  /** The redemption code a `redeem` row credited (its id, never the code). */
  code_id: number | null;
}

/** The charge of one image request: its ledger row and its pending request record, together. */
export interface ImageCharge {
  requestId: string;
  userId: number;
  keyId: number | null;
  kind: "generate" | "edit";
  model: string;
  /** Credits this request costs (the model's price when it was accepted); 0 charges nothing. The refund returns this, never a later price. */
  price: number;
  prompt: string;
  /** The request is a task (async, streamed, or sent with an Idempotency-Key): its row, in the same transaction. */
  task?: NewTask;
  /** Claims the Idempotency-Key in the same transaction; IdempotencyKeyTaken if another request holds it. */
  idempotency?: IdempotencyClaim;
}

export type TaskMode = "sync" | "async" | "stream";

/** The job of a queued task, as stored until it runs (its images are TaskInputs). */
export interface StoredJob {
  model: string;
  prompt: string;
  size: { width: number; height: number } | null;
  quality: string;
  extra: Record<string, unknown>;
}

export interface TaskInput {
  role: "image" | "mask";
  param: string;
  mime: "image/png" | "image/jpeg" | "image/webp";
  width: number;
  height: number;
  bytes: Uint8Array;
}

export interface NewTask {
  mode: TaskMode;
  /** "queued" for async tasks (the runner starts them), "running" for the others. */
  status: "queued" | "running";
  endpoint: "generations" | "edits";
  model: string;
  job?: StoredJob;
  inputs?: TaskInput[];
  webhookUrl?: string | null;
  /** An async task's queue bounds, checked inside its charge (TaskQueueFull at a bound). */
  queueLimits?: AsyncQueueLimits;
}

/** How many async tasks may be queued or running: server-wide and for one user. */
export interface AsyncQueueLimits {
  queueSize: number;
  perUserQueueSize: number;
}

/** The async queue is at one of its bounds; nothing was charged. */
export class TaskQueueFull extends Error {
  override name = "TaskQueueFull";
}

/** Refuses an async task when the queue (server-wide or the user's share) is at its bound. */
export function assertAsyncRoom(load: { all: number; user: number }, limits: AsyncQueueLimits): void {
  if (load.user >= limits.perUserQueueSize) {
    throw new TaskQueueFull(`You have ${load.user} async tasks queued or running, the most one user may have (${limits.perUserQueueSize}); wait for some to finish.`);
  }
  if (load.all >= limits.queueSize) throw new TaskQueueFull(`The async task queue is full (${limits.queueSize} tasks); retry shortly.`);
}

export interface IdempotencyClaim {
  key: string;
  fingerprint: string;
  expiresAt: number;
}

export interface TaskRow {
  id: string;
  user_id: number;
  mode: TaskMode;
  status: "queued" | "running" | "succeeded" | "failed" | "canceled";
  endpoint: "generations" | "edits";
  model: string;
  job: string | null;
  webhook_url: string | null;
  result: string | null;
  error: string | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  expires_at: number | null;
  expired: number;
  /** A keyed task's key expiry: it is kept at least until then, whatever the retention. */
  keep_until: number | null;
  /** When a cancel was asked for while it ran (the instance running it aborts it). */
  cancel_requested_at: number | null;
}

export interface IdempotencyRow {
  user_id: number;
  key: string;
  fingerprint: string;
  request_id: string;
  created_at: number;
  expires_at: number;
}

/** Tasks and Idempotency-Keys (the money of a task moves through CreditLedger). */
export interface TaskStore {
  get(id: string): Promise<TaskRow | null>;
  /** The user's tasks, newest first, after the cursor task (exclusive). */
  list(userId: number, opts: { status?: TaskRow["status"]; limit: number; after?: string }): Promise<TaskRow[]>;
  inputs(id: string): Promise<TaskInput[]>;
  /** Queued tasks in the order they run. */
  queued(): Promise<TaskRow[]>;
  /** 1-based place of a queued task in the queue. */
  queuePosition(id: string): Promise<number>;
  /** Queued and running async tasks, server-wide and for one user. */
  asyncLoad(userId: number): Promise<{ all: number; user: number }>;
  /**
   * queued → running; false when it was no longer queued (another runner claimed it) or its
   * user (`userId`, the task's) already has `perUserLimit` async tasks running on any instance.
   */
  start(id: string, now: number, userId: number, perUserLimit: number): Promise<boolean>;
  /** Records a cancel of a running task for the instance that runs it; false when it was no longer running. */
  requestCancel(id: string, now: number): Promise<boolean>;
  /** Of these tasks (those an instance runs), the ones to abort: a cancel was asked for, or they ended elsewhere. */
  toAbort(ids: string[]): Promise<string[]>;
  /** The Idempotency-Key's record while it has not expired. */
  idempotency(userId: number, key: string, now: number): Promise<IdempotencyRow | null>;
  /** Drops results past their retention and keys past their 24 h; returns the tasks expired. */
  expire(now: number): Promise<number>;
}

/** Another request claimed this Idempotency-Key first; nothing was written. */
export class IdempotencyKeyTaken extends Error {
  override name = "IdempotencyKeyTaken";
}

/** How a charged request ended when it did not succeed (recorded with its refund). */
export interface FailedOutcome {
  status: "failed" | "interrupted";
  errorCode: string;
  errorMessage: string;
  /** The engine's own (redacted, bounded) words for admins (describeFailure's `detail`); never shown to users. */
  errorDetail?: string | null;
  queueMs?: number | null;
  generationMs?: number | null;
  /** For a task: how it ends (failed or canceled), its error object, and when its record expires. */
  task?: { status: "failed" | "canceled"; error: ErrorBody["error"]; expiresAt: number };
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
  /** As FailedOutcome.errorDetail: for admins only. */
  errorDetail?: string | null;
  prompt?: string | null;
}

/** The balance is below the cost; nothing was written. No `code` property (see http/errors). */
export class InsufficientCreditsError extends Error {
  override name = "InsufficientCreditsError";
  constructor(
    message: string,
    /** What the request would cost, and the balance it met (when known), for the 402's message. */
    readonly cost?: { price: number; balance: number },
  ) {
    super(message);
  }
}

/** Refuses an image request whose model costs more than the balance; before anything is queued or written. */
export function assertCanPay(balance: number | null, price: number): void {
  const have = balance ?? 0;
  if (have < price) throw new InsufficientCreditsError("insufficient credits to generate an image", { price, balance: have });
}

/**
 * The API key has spent its credit cap (the user may still have credits); nothing was written.
 * Checked inside the charge's transaction, so concurrent requests cannot both pass the cap.
 */
export class KeyCreditCapReached extends Error {
  override name = "KeyCreditCapReached";
  constructor(readonly cap: number) {
    super(`this API key has reached its credit cap of ${cap}`);
  }
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
  balance(userId: number): Promise<number | null>;
  /** −price credits, a charge row and a pending request, all or nothing; InsufficientCreditsError below the price. Returns the balance after. */
  chargeForImage(charge: ImageCharge, now: number): Promise<number>;
  /**
   * The refund happens at most once per request, whoever asks; true if this call made it. A run
   * after one that may have landed (`retry`, from whenWritable) with the same `now` also counts
   * the row already ended exactly as it would end it (status, error code, finished_at) as its own.
   */
  refundOnce(requestId: string, outcome: FailedOutcome, now: number, retry?: WriteAttempt): Promise<boolean>;
  /**
   * refundOnce for a charge whose COMMIT may or may not have landed: waits for that charge to
   * end if it is still in flight, then refunds it once if it committed; writes nothing if not.
   */
  refundLostCharge(charge: { requestId: string; userId: number }, outcome: FailedOutcome, now: number, retry?: WriteAttempt): Promise<boolean>;
}

export interface RequestLog {
  /**
   * pending → succeeded (with a task's result, kept until expiresAt); false when the request was
   * no longer pending. A run after one that may have landed (`retry`, from whenWritable) finding
   * it already succeeded is true: only its own flow marks a request succeeded.
   */
  markSucceeded(id: string, outcome: { queueMs: number; generationMs: number; task?: { result: string; expiresAt: number } } & TraceFields, now: number, retry?: WriteAttempt): Promise<boolean>;
  recordTrace(id: string, trace: TraceFields): Promise<void>;
  /** Queues the row (written with the next batch): the answer never waits for it. */
  recordChat(record: ChatRecord, now: number): void;
}

/**
 * What whenWritable tells each run of a write. A conditional update ("… WHERE status =
 * 'pending'") run again after its COMMIT's answer was lost finds its own change made and
 * changes nothing: told so, it re-reads the row rather than report that someone else ended it.
 */
export interface WriteAttempt {
  /** An earlier run lost its connection (PostgreSQL) and may have committed. */
  mayHaveLanded: boolean;
}

/** What the image and chat flows need from storage. */
export interface FlowStore {
  credits: CreditLedger;
  requests: RequestLog;
  tasks: TaskStore;
  /**
   * Runs one write (a transaction, all or nothing), retrying without blocking the event loop
   * while it meets another writer (SQLite: another process's write lock; PostgreSQL: a
   * serialization failure or deadlock); DatabaseBusyError after maxWaitMs (Infinity retries
   * until it lands).
   */
  whenWritable<T>(write: (attempt: WriteAttempt) => T | Promise<T>, opts: { maxWaitMs: number }): Promise<T>;
  /**
   * The connection to the database failed (PostgreSQL: unreachable, or dropped mid-statement):
   * a transaction that met it may have committed or not, its answer lost.
   */
  isConnectionLost(e: unknown): boolean;
}

/** What accounts (users and API keys) need from storage. */
export interface AccountStore {
  users: { create(input: { email: string; passwordHash: string | null; role: Role; credits: number; note?: string; actor?: string }, now: number): Promise<UserRow> };
  keys: {
    create(input: { userId: number; name: string; prefix: string; secretHash: string; limits?: KeyLimits }, now: number): Promise<ApiKeyRow>;
    ownerByHash(secretHash: string): Promise<KeyOwner | null>;
    /** Moves at once when this process revokes a key or changes a user's disabled flag or role (memory only, free). */
    localRevision(): number;
    /** Moves when any process or instance committed a change a cached key owner may hold; one read, so callers throttle it. */
    externalRevision(): Promise<number>;
    /** last_used_at is a hint: false when the store was locked and nothing was written. */
    touch(keyId: number, now: number): Promise<boolean>;
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
  disabledAccounts(upstreamId: string): Promise<Map<string, DisabledInfo>>;
  /**
   * Moves when another process committed a write (it may have enabled an account): the pool
   * re-reads the flags only then. Without it the pool re-reads them on every pick.
   */
  externalRevision?(): Promise<number>;
  disableAccount(upstreamId: string, accountId: string, reason: string, at: number): Promise<void>;
  /** Latest in-memory state, for the CLI in another process (written throttled). */
  saveSnapshot(upstreamId: string, accounts: AccountSnapshot[], at: number): Promise<void>;
}
