/**
 * Deadlines for the small request bodies that are read without a pacing wrapper (see
 * guardBody's fast path): one shared coarse ticker fails the reads that passed their deadline,
 * so a body that arrives promptly costs one Set insert and delete, no timer of its own.
 */

/** How often the ticker looks; a late body is failed at most this long after its deadline. */
export const SLOW_BODY_TICK_MS = 250;

interface Watched {
  deadline: number;
  /** Cleared when the read settles (see byDeadline). */
  fail: (() => void) | null;
}

const watched = new Set<Watched>();
let ticker: ReturnType<typeof setInterval> | undefined;

function tick(): void {
  if (watched.size === 0) {
    clearInterval(ticker);
    ticker = undefined;
    return;
  }
  const now = performance.now();
  for (const entry of watched) {
    if (entry.deadline <= now) {
      watched.delete(entry);
      entry.fail?.();
    }
  }
}

/**
 * `read`'s result, or the error `tooSlow()` makes if it has not settled by `deadline`
 * (performance.now() time). The read itself is not stopped: its request is answered with
 * `connection: close`, which ends it.
 */
export function byDeadline<T>(read: Promise<T>, deadline: number, tooSlow: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const entry: Watched = { deadline, fail: () => reject(tooSlow()) };
    watched.add(entry);
    if (ticker === undefined) {
      ticker = setInterval(tick, SLOW_BODY_TICK_MS);
      // Only pending reads need it; it must not keep a stopping process alive.
      ticker.unref?.();
    }
    // JavaScriptCore keeps what an entry deleted from a long-lived Set referenced alive through
    // the next young-generation collection (bench/gc-churn.ts): cleared, the entry no longer
    // holds the read's promise and body.
    const settle = () => {
      watched.delete(entry);
      entry.fail = null;
    };
    read.then(
      (value) => {
        settle();
        resolve(value);
      },
      (error: unknown) => {
        settle();
        reject(error);
      },
    );
  });
}

/** Reads waiting for their body (for tests: nothing may stay watched). */
export function watchedBodies(): number {
  return watched.size;
}
