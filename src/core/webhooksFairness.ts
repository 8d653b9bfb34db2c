/**
 * How the delivery worker shares itself between users: one user's endpoint that hangs (or a
 * backlog of their events) must not hold every slot and delay everyone else's webhooks.
 */

/**
 * Attempts one user may have in flight at once on one instance: a quarter of the slots (at
 * least one), so it takes four users with hanging receivers to fill a worker, and a user alone
 * still gets a few attempts in parallel. Per instance: each instance counts only its own
 * attempts, so with N instances a user may hold up to N times this across the deployment.
 */
export function perUserSlots(concurrency: number): number {
  return Math.max(1, Math.floor(concurrency / 4));
}

/**
 * Test events (`POST /webhooks/test`, free) a user may have pending at once: enough to try an
 * endpoint a few times, too few to fill the queue with retries to a receiver that never answers.
 */
export const MAX_PENDING_TESTS = 3;

/** Counts attempts in flight by user, for the claim's `held`. */
export class InflightByUser {
  private readonly counts = new Map<number, number>();

  get held(): ReadonlyMap<number, number> {
    return this.counts;
  }

  add(userId: number): void {
    this.counts.set(userId, (this.counts.get(userId) ?? 0) + 1);
  }

  remove(userId: number): void {
    const n = (this.counts.get(userId) ?? 0) - 1;
    if (n > 0) this.counts.set(userId, n);
    else this.counts.delete(userId);
  }
}
