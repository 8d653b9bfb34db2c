/**
 * Rows written off the response path: `add` only queues; the queue is written in one call
 * (one transaction) at most every `intervalMs`, at most `maxBatch` rows at a time, and at once
 * on `flush()` (a page about to read them, the graceful stop).
 *
 * - A write that fails because it may succeed later (the database is locked by another
 *   process) keeps its rows at the head of the queue for the next round, in order.
 * - Any other failure drops that batch only (reported through `onDropped`), so one bad batch
 *   never blocks or loses the ones after it, and nothing is thrown at the caller of `add`.
 * - The queue is bounded (`maxQueued`): past it the oldest rows are dropped and reported,
 *   so a database locked for a long time cannot grow memory without limit.
 * A crash loses at most what was queued: only rows that may be lost (chat history) go here.
 */
export interface BatchWriterOptions<T> {
  /** Writes rows all or nothing (one transaction). */
  write: (rows: T[]) => void;
  /** True when a failed write may succeed later unchanged (e.g. SQLITE_BUSY). */
  isRetryable: (e: unknown) => boolean;
  /** Rows that will never be written, and why. */
  onDropped: (rows: readonly T[], error: unknown) => void;
  intervalMs: number;
  maxBatch: number;
  maxQueued: number;
  /** A one-shot timer (the fake clock's in tests); returns its cancel. */
  schedule?: (fn: () => void, ms: number) => () => void;
}

const realTimer = (fn: () => void, ms: number) => {
  const t = setTimeout(fn, ms);
  // Pending rows never keep a process alive: stop() flushes them.
  (t as { unref?: () => void }).unref?.();
  return () => clearTimeout(t);
};

export class BatchWriter<T> {
  private queue: T[] = [];
  private cancelTimer: (() => void) | null = null;
  private stopped = false;
  private readonly schedule: NonNullable<BatchWriterOptions<T>["schedule"]>;

  constructor(private readonly opts: BatchWriterOptions<T>) {
    this.schedule = opts.schedule ?? realTimer;
  }

  /** Queues a row; it is written within about `intervalMs`. */
  add(row: T): void {
    if (this.queue.length >= this.opts.maxQueued) {
      const dropped = this.queue.splice(0, this.queue.length - this.opts.maxQueued + 1);
      this.opts.onDropped(dropped, new Error(`more than ${this.opts.maxQueued} rows waiting to be written`));
    }
    this.queue.push(row);
    if (this.stopped) this.flush();
    else if (!this.cancelTimer) this.cancelTimer = this.schedule(() => this.tick(), this.opts.intervalMs);
  }

  /** Rows queued and not yet written, oldest first. */
  pending(): readonly T[] {
    return this.queue;
  }

  /** Writes everything queued now, batch by batch; false when some rows had to stay (retryable failure). */
  flush(): boolean {
    this.cancel();
    while (this.queue.length > 0) {
      if (!this.writeBatch()) {
        this.arm();
        return false;
      }
    }
    return true;
  }

  /**
   * Writes what is queued; rows added later are written at once (no timer is left behind).
   * What cannot be written now is reported as dropped: the caller is about to close the store.
   */
  stop(): boolean {
    this.stopped = true;
    const done = this.flush();
    this.cancel();
    if (!done) {
      const left = this.queue;
      this.queue = [];
      this.opts.onDropped(left, new Error("the store was locked when the server stopped"));
    }
    return done;
  }

  private tick(): void {
    this.cancelTimer = null;
    // One batch per round keeps each transaction (and the pause it causes) bounded.
    if (this.queue.length > 0 && !this.writeBatch()) return this.arm(this.opts.intervalMs);
    // A backlog (more than a batch arrived in one interval) is written on the next turn.
    this.arm(0);
  }

  /** One batch from the head of the queue; false when it must be tried again later. */
  private writeBatch(): boolean {
    const batch = this.queue.slice(0, this.opts.maxBatch);
    try {
      this.opts.write(batch);
    } catch (e) {
      if (this.opts.isRetryable(e)) return false;
      this.queue.splice(0, batch.length);
      this.opts.onDropped(batch, e);
      return true;
    }
    this.queue.splice(0, batch.length);
    return true;
  }

  private arm(ms = this.opts.intervalMs): void {
    if (this.cancelTimer || this.queue.length === 0 || this.stopped) return;
    this.cancelTimer = this.schedule(() => this.tick(), ms);
  }

  private cancel(): void {
    this.cancelTimer?.();
    this.cancelTimer = null;
  }
}
