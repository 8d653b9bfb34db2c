/**
 * Rows written off the response path: `add` only queues; the queue is written in one call
 * (one transaction) at most every `intervalMs`, at most `maxBatch` rows at a time, and at once
 * on `flush()` (a page about to read them, the graceful stop). Writes are asynchronous and
 * never overlap: one batch is in flight at a time, so rows land in the order they were added.
 *
 * - A write that fails because it may succeed later (the database is locked by another
 *   process) keeps its rows at the head of the queue for the next round, in order.
 * - Any other failure may come from a row the database refuses (a value it cannot store, a
 *   duplicate): the batch is taken apart to find it. It is written again in halves, a half
 *   that fails in halves again, one part per round, until the rows that fail by themselves
 *   are found; only those are dropped (reported through `onDropped` once the batch is done,
 *   one report per distinct error), so one client's bad row never costs the others theirs.
 *   A batch of n rows (n ≤ maxBatch) takes at most 2n − 1 writes, k bad rows about
 *   2k·log2(n). A failure no row can cause (`atFaultMayBeRows` false: the database
 *   unreachable) drops the batch whole, as before: taking it apart would only wait for the
 *   connection to fail 2n − 1 times. Either way one bad batch never blocks or loses the ones
 *   after it, and nothing is thrown at the caller of `add`.
 * - The queue is bounded (`maxQueued`): past it the oldest rows are dropped and reported,
 *   so a database locked for a long time cannot grow memory without limit.
 * A crash loses at most what was queued: only rows that may be lost (chat history) go here.
 */
import { backgroundTimer, type Schedule } from "./clock";

export interface BatchWriterOptions<T> {
  /** Writes rows all or nothing (one transaction). */
  write: (rows: T[]) => Promise<void> | void;
  /** True when a failed write may succeed later unchanged (e.g. SQLITE_BUSY). */
  isRetryable: (e: unknown) => boolean;
  /**
   * For a failure that is not retryable: false when no row can have caused it (the database
   * unreachable), so the batch is dropped whole instead of taken apart. Every failure by default.
   */
  atFaultMayBeRows?: (e: unknown) => boolean;
  /** Rows that will never be written, and why. */
  onDropped: (rows: readonly T[], error: unknown) => void;
  intervalMs: number;
  maxBatch: number;
  maxQueued: number;
  /** A one-shot timer (the fake clock's in tests); pending rows never keep a process alive: stop() flushes them. */
  schedule?: Schedule;
}


export class BatchWriter<T> {
  /** Rows waiting, oldest first; a batch in flight has left it (and comes back on a retryable failure). */
  private queue: T[] = [];
  private cancelTimer: (() => void) | null = null;
  private stopped = false;
  /** The one write in flight. */
  private writing: Promise<void> | null = null;
  /** The timer's round in flight (its write, then arming the next round). */
  private round: Promise<void> | null = null;
  /**
   * While a failed batch is taken apart: the sizes of the parts the head of the queue is written
   * in, in order (its rows stay in the queue meanwhile, in order, ahead of later rows). A part
   * that fails is replaced by its two halves; a row that fails alone is dropped.
   */
  private parts: number[] = [];
  /** Rows that failed alone while a batch was taken apart, by error message: reported once it is done. */
  private failedAlone = new Map<string, { rows: T[]; error: unknown }>();
  private readonly schedule: NonNullable<BatchWriterOptions<T>["schedule"]>;

  constructor(private readonly opts: BatchWriterOptions<T>) {
    this.schedule = opts.schedule ?? backgroundTimer;
  }

  /** Queues a row; it is written within about `intervalMs`. */
  add(row: T): void {
    this.queue.push(row);
    this.dropOverflow();
    if (this.stopped) void this.flush();
    else this.arm();
  }

  /** Rows queued and not yet written (nor being written), oldest first. */
  pending(): readonly T[] {
    return this.queue;
  }

  /** Resolves once no write and no timer round is in flight (tests, and readers that must see the rows). */
  async idle(): Promise<void> {
    while (this.round || this.writing) await (this.round ?? this.writing);
  }

  /**
   * Writes everything queued now (after the write in flight), batch by batch; false when some
   * rows had to stay (retryable failure: they are tried again on the next round). Never rejects.
   */
  async flush(): Promise<boolean> {
    this.cancel();
    while (this.queue.length > 0 || this.writing) {
      if (!(await this.writeNext())) {
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
  async stop(): Promise<boolean> {
    this.stopped = true;
    const done = await this.flush();
    this.cancel();
    if (!done) {
      const left = this.queue;
      this.queue = [];
      this.parts = [];
      this.reportFailedAlone();
      this.opts.onDropped(left, new Error("the store was locked when the server stopped"));
    }
    return done;
  }

  private tick(): void {
    this.cancelTimer = null;
    // One batch per round keeps each transaction (and the pause it causes) bounded; a backlog
    // (more than a batch arrived in one interval) is written on the next turn.
    const next = (ms: number) => {
      this.round = null;
      this.arm(ms);
    };
    // writeNext rejects only if onDropped or isRetryable throws: the rows stay for the next round.
    this.round = this.writeNext().then((ok) => next(ok ? 0 : this.opts.intervalMs), () => next(this.opts.intervalMs));
  }

  /**
   * One batch (or one part of a batch taken apart) from the head of the queue, after the write
   * in flight; false when it must be tried again later (its rows are back at the head, in order).
   */
  private async writeNext(): Promise<boolean> {
    while (this.writing) await this.writing;
    if (this.queue.length === 0) return true;
    const batch = this.queue.splice(0, this.parts[0] ?? this.opts.maxBatch);
    let finished!: () => void;
    this.writing = new Promise<void>((resolve) => (finished = resolve));
    try {
      await this.opts.write(batch);
      this.parts.shift();
    } catch (e) {
      if (this.opts.isRetryable(e)) {
        this.queue.unshift(...batch);
        this.dropOverflow();
        return false;
      }
      this.parts.shift();
      if (this.opts.atFaultMayBeRows?.(e) === false) this.opts.onDropped(batch, e);
      else this.takeApart(batch, e);
    } finally {
      this.writing = null;
      finished();
    }
    if (this.parts.length === 0) this.reportFailedAlone();
    return true;
  }

  /**
   * A batch (or part) failed for good: a row alone is dropped (reported with the others once
   * the batch is done); more go back to the head of the queue as two halves, written next.
   */
  private takeApart(batch: T[], e: unknown): void {
    if (batch.length === 1) {
      const key = String(e);
      const same = this.failedAlone.get(key);
      if (same) same.rows.push(batch[0]!);
      else this.failedAlone.set(key, { rows: [batch[0]!], error: e });
      return;
    }
    const half = Math.ceil(batch.length / 2);
    this.queue.unshift(...batch);
    this.parts.unshift(half, batch.length - half);
  }

  private reportFailedAlone(): void {
    if (this.failedAlone.size === 0) return;
    const reports = [...this.failedAlone.values()];
    this.failedAlone = new Map();
    for (const r of reports) this.opts.onDropped(r.rows, r.error);
  }

  /** Past maxQueued the oldest rows are dropped and reported (parts of a batch taken apart first: they are the oldest). */
  private dropOverflow(): void {
    if (this.queue.length <= this.opts.maxQueued) return;
    const dropped = this.queue.splice(0, this.queue.length - this.opts.maxQueued);
    for (let n = dropped.length; n > 0 && this.parts.length > 0; ) {
      const taken = Math.min(n, this.parts[0]!);
      n -= taken;
      if (taken === this.parts[0]) this.parts.shift();
      else this.parts[0] = this.parts[0]! - taken;
    }
    this.opts.onDropped(dropped, new Error(`more than ${this.opts.maxQueued} rows waiting to be written`));
  }

  private arm(ms = this.opts.intervalMs): void {
    if (this.cancelTimer || this.round || this.queue.length === 0 || this.stopped) return;
    this.cancelTimer = this.schedule(() => this.tick(), ms);
  }

  private cancel(): void {
    this.cancelTimer?.();
    this.cancelTimer = null;
  }
}
