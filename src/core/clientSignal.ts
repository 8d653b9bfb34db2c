/**
 * The client's abort signal, read only when it can matter. In Bun, reading `request.signal`
 * costs a request several microseconds (the signal is made on first access), and a chat answer
 * from a fast upstream is done long before a hang-up could change anything. So the http layer
 * may pass a getter: the work watches it only once it has run for WATCH_AFTER_MS (to twice
 * that), picked up by one shared ticker (not a timer per request). A client that hung up earlier is seen then: a
 * signal that is already aborted aborts the work at once.
 */
import { listenForAbort } from "./cancelScope";

export type ClientSignal = AbortSignal | (() => AbortSignal);

/** How long work runs before a lazily given client signal is read and watched. */
export const WATCH_AFTER_MS = 50;

/** The signal itself (reading it now); undefined when none was given. */
export function signalOf(signal: ClientSignal | undefined): AbortSignal | undefined {
  return typeof signal === "function" ? signal() : signal;
}

interface Pending {
  /** Both cleared when the watch ends (see watchClient). */
  read: (() => AbortSignal) | null;
  onAbort: ((reason: unknown) => void) | null;
  /** The ticker's round when the work started; it is watched two rounds later. */
  round: number;
  detach?: () => void;
}

const pending = new Set<Pending>();
let ticker: ReturnType<typeof setInterval> | null = null;
/**
 * Ticks so far (one every WATCH_AFTER_MS): work added after tick r is read at tick r + 2, so it
 * has run WATCH_AFTER_MS to twice that by then, and adding work reads no clock.
 */
let round = 0;

function tick(): void {
  round++;
  for (const p of pending) {
    if (round - p.round < 2) continue;
    pending.delete(p);
    p.detach = listenForAbort(p.read!(), p.onAbort!);
  }
  // Stopped on an idle tick rather than on every removal: a steady trickle of requests does not
  // start and stop it each time.
  if (pending.size === 0 && ticker) {
    clearInterval(ticker);
    ticker = null;
  }
}

/**
 * Calls `onAbort` when the client's signal aborts: at once for a signal, after WATCH_AFTER_MS
 * (to twice that) for a getter. Returns the function that stops watching (call it when the work is done).
 */
export function watchClient(signal: ClientSignal | undefined, onAbort: (reason: unknown) => void): () => void {
  if (signal === undefined) return () => {};
  if (typeof signal !== "function") return listenForAbort(signal, onAbort);
  if (!ticker) {
    ticker = setInterval(tick, WATCH_AFTER_MS);
    (ticker as { unref?: () => void }).unref?.();
  }
  const p: Pending = { read: signal, onAbort, round };
  pending.add(p);
  return () => {
    pending.delete(p);
    p.detach?.();
    // JavaScriptCore keeps what an entry deleted from a long-lived Set referenced alive through
    // the next young-generation collection (bench/gc-churn.ts): this one would keep the
    // request's whole graph, promoted as garbage.
    p.read = p.onAbort = null;
    p.detach = undefined;
  };
}
