/**
 * Sign-in and redemption throttling: a count of attempts per key (an account's email, a user,
 * a client address) within a window. It only has to slow guessing down; it is not a quota.
 * Two implementations of one interface, chosen in services.ts:
 * - AttemptLimiter: this process's memory, a sliding window (the default);
 * - RedisAttemptLimiter (core/redisAttemptLimiter.ts): with [redis] url, shared by every
 *   instance, so spreading guesses over instances does not multiply the allowance.
 *
 * An attempt is taken (counted and allowed, or refused) in one step, before the guess is
 * judged: a check followed by a separate record let every one of many concurrent guesses pass
 * the check before any was counted. Callers that count only failures give a success back.
 */
import type { Clock } from "./clock";

export interface AttemptCounter {
  /**
   * Counts one attempt if one is allowed now and returns 0; otherwise counts nothing and returns
   * the milliseconds until one is allowed. Atomic: concurrent takes never exceed the limit.
   */
  take(key: string): Promise<number>;
  /** Uncounts one taken attempt (one that did not count after all); never below zero. */
  giveBack(key: string): Promise<void>;
  reset(key: string): Promise<void>;
}

/** Makes the counter for one kind of attempt (`name`, e.g. "signin:account"), allowing `max` per `windowMs`. */
export type AttemptCounters = (name: string, max: number, windowMs: number) => AttemptCounter;

/** One attempt as seen by one counter: the counter and the key it counts under. */
export type AttemptKey = readonly [AttemptCounter, string];

/**
 * Takes one attempt from every counter at once (one round trip's wait on Redis). 0: allowed, and
 * counted by each; otherwise the longest wait among the counters that refused, and the counters
 * that did count it are given it back, so a refused attempt is counted nowhere (as before).
 */
export async function takeAttempt(keys: readonly AttemptKey[]): Promise<number> {
  const waits = await Promise.all(keys.map(([counter, key]) => counter.take(key)));
  const wait = Math.max(0, ...waits);
  if (wait > 0) await giveBackAttempt(keys.filter((_, i) => waits[i] === 0));
  return wait;
}

/**
 * Gives an attempt back to every counter, best effort: a counter that cannot be reached (Redis
 * down) keeps it counted, which only errs towards throttling, rather than failing an attempt
 * that was already judged (a code already redeemed must not answer 503).
 */
export async function giveBackAttempt(keys: readonly AttemptKey[]): Promise<void> {
  await Promise.allSettled(keys.map(([counter, key]) => counter.giveBack(key)));
}

/** Keys held before the first sweep of keys whose window has passed. */
const PRUNE_FROM_KEYS = 10_000;

export class AttemptLimiter implements AttemptCounter {
  private readonly attempts = new Map<string, number[]>();
  /**
   * The next sweep waits until the map holds twice what the last one kept: swept on every
   * attempt past 10 000 live keys (addresses are cheap to vary with IPv6), each attempt paid for
   * the whole map (2–8 ms at 10 000 keys, 18 ms at 20 000); now each key is swept about once.
   */
  private pruneAt = PRUNE_FROM_KEYS;
  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly clock: Clock,
  ) {}

  // Synchronous from the check to the push (no await): that is what makes it atomic here.
  async take(key: string): Promise<number> {
    const recent = this.recent(key);
    if (recent.length >= this.max) return Math.max(1, recent[0]! + this.windowMs - this.clock());
    recent.push(this.clock());
    this.attempts.set(key, recent);
    if (this.attempts.size > this.pruneAt) this.prune();
    return 0;
  }

  async giveBack(key: string): Promise<void> {
    const recent = this.recent(key);
    recent.pop(); // the newest: the one just taken, in all but a concurrent take's case
    if (recent.length === 0) this.attempts.delete(key);
    else this.attempts.set(key, recent);
  }

  async reset(key: string): Promise<void> {
    this.attempts.delete(key);
  }

  private recent(key: string): number[] {
    const since = this.clock() - this.windowMs;
    return (this.attempts.get(key) ?? []).filter((t) => t > since);
  }

  private prune(): void {
    for (const key of [...this.attempts.keys()]) {
      if (this.recent(key).length === 0) this.attempts.delete(key);
    }
    this.pruneAt = Math.max(PRUNE_FROM_KEYS, 2 * this.attempts.size);
  }

  /** Keys held now (tests). */
  get size(): number {
    return this.attempts.size;
  }
}

/** In-memory counters on this clock (the default). */
export function memoryAttemptCounters(clock: Clock): AttemptCounters {
  return (_name, max, windowMs) => new AttemptLimiter(max, windowMs, clock);
}
