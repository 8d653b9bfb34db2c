/**
 * Work that outlives its HTTP request (a generation whose client went away): tracked so a
 * graceful stop can wait for it before closing the database.
 *
 * Counted, not kept in a Set: JavaScriptCore keeps an entry deleted from a long-lived Set
 * referenced through the next young-generation collection (bench/gc-churn.ts), so a Set of the
 * work's promises would keep every finished request's result (an image's bytes) alive and
 * promote it, for a full collection to free.
 */
export class BackgroundWork {
  private running = 0;
  private whenIdle: Array<() => void> = [];

  track<T>(work: Promise<T>): Promise<T> {
    this.begin();
    // One reaction for either outcome (it never rejects, so nothing is left unhandled).
    const done = () => this.end();
    work.then(done, done);
    return work;
  }

  /**
   * Counts work whose owner says when it ends (`end`, exactly once): for work that already has
   * a reaction of its own to its settling, so tracking it adds none.
   */
  begin(): void {
    this.running++;
  }

  end(): void {
    if (--this.running > 0) return;
    const waiting = this.whenIdle;
    this.whenIdle = [];
    for (const resolve of waiting) resolve();
  }

  get size(): number {
    return this.running;
  }

  /** Resolves once no tracked work is running (work tracked meanwhile is waited for too). */
  idle(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.whenIdle.push(resolve));
  }
}
