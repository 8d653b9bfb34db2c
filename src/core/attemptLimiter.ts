/**
 * Sign-in and redemption throttling: a count of attempts per key (an account's email, a user,
 * a client address) within a window. It only has to slow guessing down; it is not a quota.
 * Two implementations of one interface, chosen in services.ts:
 * - AttemptLimiter: this process's memory, a sliding window (the default);
 * - RedisAttemptLimiter (core/redisAttemptLimiter.ts): with [redis] url, shared by every
 *   instance, so spreading guesses over instances does not multiply the allowance.
 */
import type { Clock } from "./clock";

export interface AttemptCounter {
  /** Milliseconds until another attempt is allowed; 0 when one is allowed now. */
  retryAfterMs(key: string): Promise<number>;
  record(key: string): Promise<void>;
  reset(key: string): Promise<void>;
}

/** Makes the counter for one kind of attempt (`name`, e.g. "signin:account"), allowing `max` per `windowMs`. */
export type AttemptCounters = (name: string, max: number, windowMs: number) => AttemptCounter;

export class AttemptLimiter implements AttemptCounter {
  private readonly attempts = new Map<string, number[]>();
  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly clock: Clock,
  ) {}

  async retryAfterMs(key: string): Promise<number> {
    const recent = this.recent(key);
    if (recent.length < this.max) return 0;
    return Math.max(1, recent[0]! + this.windowMs - this.clock());
  }

  async record(key: string): Promise<void> {
    const recent = this.recent(key);
    recent.push(this.clock());
    this.attempts.set(key, recent);
    if (this.attempts.size > 10_000) this.prune();
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
  }
}

/** In-memory counters on this clock (the default). */
export function memoryAttemptCounters(clock: Clock): AttemptCounters {
  return (_name, max, windowMs) => new AttemptLimiter(max, windowMs, clock);
}
