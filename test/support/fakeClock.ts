/** A clock that moves only when the test moves it (for `now`/`clock` parameters). */
export interface FakeClock {
  now: () => number;
  /** Moves time forward; returns the new time. */
  advance(ms: number): number;
}

export function fakeClock(start = 1_000_000): FakeClock {
  let t = start;
  return {
    now: () => t,
    advance(ms: number) {
      if (ms < 0) throw new RangeError("a clock does not go back");
      t += ms;
      return t;
    },
  };
}

/**
 * A clock at real speed that starts at noon UTC of today, for a server whose test compares what
 * it recorded with "today": on the real clock, a run that crosses a UTC midnight records its
 * requests on one day and asks for the next.
 */
export function middayClock(): () => number {
  const started = Date.now();
  const day = new Date(started);
  const noon = Date.UTC(day.getUTCFullYear(), day.getUTCMonth(), day.getUTCDate(), 12);
  return () => noon + (Date.now() - started);
}
