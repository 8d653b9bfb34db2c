/** Wall-clock time in milliseconds since the epoch; injected so tests can move time themselves. */
export type Clock = () => number;

/** A one-shot timer (a fake one in tests); returns its cancel. */
export type Schedule = (fn: () => void, ms: number) => () => void;

/**
 * The real one-shot timer for background work that has its own stop (a batch flush, a
 * heartbeat): unref'd, so a pending tick never keeps the process alive.
 */
export const backgroundTimer: Schedule = (fn, ms) => {
  const t = setTimeout(fn, ms);
  (t as { unref?: () => void }).unref?.();
  return () => clearTimeout(t);
};
