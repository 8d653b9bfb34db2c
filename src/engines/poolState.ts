/**
 * The part of an account pool's state that several instances must agree on: how many
 * requests each account is serving, which accounts cool down (and until when), consecutive
 * failures and rate limits, and whether a probe is due. The pool (engines/pool.ts) keeps the
 * policy (which account, how long a rest); this keeps the counts, with two implementations:
 * - LocalPoolState: in this process's memory (the default, one instance);
 * - RedisPoolState (engines/redisPoolState.ts): in Redis with [redis] url, shared by every
 *   instance, in-flight slots as leases their holder renews.
 *
 * Every change that a decision depends on is atomic here (take checks capacity and counts in
 * one step), so two pools sharing the state never exceed an account's capacity together.
 */

/** What the pool knows about one account from the shared state. */
export interface SharedAccountState {
  inFlight: number;
  /** Absolute time (the pool's clock) until which the account rests; 0 when it does not. */
  coolingUntil: number;
  consecutiveFailures: number;
  rateLimitStreak: number;
  /** After a failure cooldown: one request at a time, whose outcome decides. */
  probeNeeded: boolean;
}

/** One slot taken on an account; give it back with release(). */
export interface AccountLease {
  accountId: string;
  id: string;
}

/**
 * A state whose answers need no wait (this process's memory): the pool's common path, a free
 * account and nobody queued, then picks and takes without an await, and reads the counts
 * without a copy.
 */
export interface ImmediatePoolState {
  /** The account's state as it is now; read it, never keep or change it. */
  peek(accountId: string): Readonly<SharedAccountState>;
  /** take(), answered at once. */
  takeNow(accountId: string, maxConcurrency: number, now: number): AccountLease | null;
}

export interface PoolState {
  /** Present when every answer is immediate (see ImmediatePoolState). */
  readonly immediate?: ImmediatePoolState;
  /**
   * How often a waiting request should look again even without a local release (capacity
   * freed by another instance is not signalled); undefined when every change is local.
   */
  readonly pollMs: number | undefined;
  /** Every account's state (expired leases dropped). */
  read(accountIds: readonly string[], now: number): Promise<Map<string, SharedAccountState>>;
  /** The last state read or written, without asking (snapshots, metrics). */
  known(accountId: string): SharedAccountState;
  /**
   * A slot on the account if it is not cooling and has room (`maxConcurrency`, or 1 while a
   * probe is due), checked and counted in one atomic step; null otherwise.
   */
  take(accountId: string, maxConcurrency: number, now: number): Promise<AccountLease | null>;
  /** Gives the slot back; never throws (a shared lease that cannot be returned expires). */
  release(lease: AccountLease): void;
  /** The account answered: failures, rate-limit streak and probe are cleared. */
  succeeded(accountId: string): Promise<void>;
  /** Counts one more consecutive failure (or 429); returns the new count and whether a probe was due. */
  failed(accountId: string, kind: "failed" | "rate_limited"): Promise<{ count: number; probeNeeded: boolean }>;
  /** Rest for `ms` from now (never shortening a longer rest); `probe` makes the next request after it a probe. */
  coolDown(accountId: string, ms: number, probe: boolean, now: number): Promise<void>;
  /** Forget failures and rests (an admin re-enabled the account). */
  reset(accountId: string): Promise<void>;
  /** Stops background work (lease renewal). */
  close(): void;
}

function fresh(): SharedAccountState {
  return { inFlight: 0, coolingUntil: 0, consecutiveFailures: 0, rateLimitStreak: 0, probeNeeded: false };
}

/** This process's memory: every answer is immediate. */
export class LocalPoolState implements PoolState, ImmediatePoolState {
  readonly pollMs = undefined;
  readonly immediate: ImmediatePoolState = this;
  private readonly accounts = new Map<string, SharedAccountState>();
  private nextLease = 0;

  private of(accountId: string): SharedAccountState {
    let s = this.accounts.get(accountId);
    if (!s) this.accounts.set(accountId, (s = fresh()));
    return s;
  }

  async read(accountIds: readonly string[]): Promise<Map<string, SharedAccountState>> {
    return new Map(accountIds.map((id) => [id, { ...this.of(id) }]));
  }

  known(accountId: string): SharedAccountState {
    return { ...this.of(accountId) };
  }

  peek(accountId: string): Readonly<SharedAccountState> {
    return this.of(accountId);
  }

  async take(accountId: string, maxConcurrency: number, now: number): Promise<AccountLease | null> {
    return this.takeNow(accountId, maxConcurrency, now);
  }

  takeNow(accountId: string, maxConcurrency: number, now: number): AccountLease | null {
    const s = this.of(accountId);
    if (s.coolingUntil > now || s.inFlight >= (s.probeNeeded ? 1 : maxConcurrency)) return null;
    s.inFlight++;
    return { accountId, id: String(++this.nextLease) };
  }

  release(lease: AccountLease): void {
    const s = this.of(lease.accountId);
    s.inFlight = Math.max(0, s.inFlight - 1);
  }

  async succeeded(accountId: string): Promise<void> {
    const s = this.of(accountId);
    s.consecutiveFailures = 0;
    s.rateLimitStreak = 0;
    s.probeNeeded = false;
  }

  async failed(accountId: string, kind: "failed" | "rate_limited"): Promise<{ count: number; probeNeeded: boolean }> {
    const s = this.of(accountId);
    const count = kind === "rate_limited" ? ++s.rateLimitStreak : ++s.consecutiveFailures;
    return { count, probeNeeded: s.probeNeeded };
  }

  async coolDown(accountId: string, ms: number, probe: boolean, now: number): Promise<void> {
    const s = this.of(accountId);
    s.coolingUntil = Math.max(s.coolingUntil, now + ms);
    if (probe) s.probeNeeded = true;
  }

  async reset(accountId: string): Promise<void> {
    const s = this.of(accountId);
    s.coolingUntil = 0;
    s.consecutiveFailures = 0;
    s.rateLimitStreak = 0;
    s.probeNeeded = false;
  }

  close(): void {}
}
