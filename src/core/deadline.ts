/**
 * The server's deadline on engine work, shared by the image and chat flows: the work gets a
 * signal that aborts at the deadline (or when the client's signal does), and the caller's
 * promise rejects with EngineTimeout at the deadline whatever the work does with its signal.
 */
import { EngineTimeout } from "./engine";
import { watchClient, type ClientSignal } from "./clientSignal";

export interface DeadlineRun<T> {
  /** The work's result, or EngineTimeout at the deadline. */
  result: Promise<T>;
  /** Settles when the work itself stops (an engine that ignores its signal may run on). */
  settled: Promise<unknown>;
}

export function withDeadline<T>(ms: number, work: (signal: AbortSignal) => Promise<T>, clientSignal?: ClientSignal): DeadlineRun<T> {
  // One controller for the work: the deadline aborts it, and so does the client's signal through
  // a listener (cheaper than AbortSignal.any on every request), removed when the work is done.
  const deadline = new AbortController();
  const signal = deadline.signal;
  const unwatch = watchClient(clientSignal, (reason) => deadline.abort(reason));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new EngineTimeout(`no result after ${ms} ms`);
      // Settle first, so an engine that resolves on abort cannot win the race.
      reject(err);
      deadline.abort(err);
    }, ms);
  });
  timedOut.catch(() => {});
  let running: Promise<T>;
  try {
    running = work(signal);
  } catch (e) {
    running = Promise.reject(e);
  }
  const settled = running.then(
    () => undefined,
    () => undefined,
  );
  void settled.then(unwatch);
  const result = Promise.race([running, timedOut]).finally(() => clearTimeout(timer));
  return { result, settled };
}

/** Resolves after ms, or at once when the signal aborts (never rejects): a wait between polls. */
export function pauseUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
