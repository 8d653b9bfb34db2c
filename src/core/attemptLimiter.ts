/**
 * Sign-in throttling: a sliding count of attempts per key (an account's email or a client
 * address) within a window. In memory, because it only has to slow guessing down on this
 * process; it is not a quota.
 */
import type { Clock } from "./clock";

export class AttemptLimiter {
  private readonly attempts = new Map<string, number[]>();
  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly clock: Clock,
  ) {}

  /** Milliseconds until another attempt is allowed; 0 when one is allowed now. */
  retryAfterMs(key: string): number {
    const recent = this.recent(key);
    if (recent.length < this.max) return 0;
    return Math.max(1, recent[0]! + this.windowMs - this.clock());
  }

  record(key: string): void {
    const recent = this.recent(key);
    recent.push(this.clock());
    this.attempts.set(key, recent);
    if (this.attempts.size > 10_000) this.prune();
  }

  reset(key: string): void {
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
