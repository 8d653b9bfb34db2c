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
