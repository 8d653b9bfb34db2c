/**
 * The server's deadline on engine work, shared by the image and chat flows: the work gets a
 * cancellation scope that aborts at the deadline (or when the client's signal does), and the
 * caller's promise rejects with EngineTimeout at the deadline whatever the work does with it.
 */
import { EngineTimeout } from "./engine";
import { watchClient, type ClientSignal } from "./clientSignal";
import { CancelScope } from "./cancelScope";
import { runAfter } from "./timerQueue";

export interface DeadlineRun<T> {
  /** The work's result, or EngineTimeout at the deadline. */
  result: Promise<T>;
  /** Settles when the work itself stops (an engine that ignores its signal may run on); never rejects. */
  settled: Promise<unknown>;
}

/**
 * `onStopped` runs once when the work itself stops, before `settled` resolves (a chat request
 * gives its gate permit back there: no promise of its own for that). It must not throw.
 */
export function withDeadline<T>(ms: number, work: (scope: CancelScope) => Promise<T>, clientSignal?: ClientSignal, onStopped?: () => void): DeadlineRun<T> {
  // One scope for the work: the deadline aborts it, and so does the client's signal (watched
  // lazily, core/clientSignal). Its AbortSignal is made only if the work asks for one; the
  // deadline is an entry on the shared timer (core/timerQueue), not a timer of its own.
  const scope = new CancelScope();
  const unwatch = watchClient(clientSignal, (reason) => scope.abort(reason));
  let resolveResult!: (value: T) => void;
  let rejectResult!: (e: unknown) => void;
  const result = new Promise<T>((resolve, reject) => {
    resolveResult = resolve;
    rejectResult = reject;
  });
  const deadline = runAfter(ms, () => {
    const err = new EngineTimeout(`no result after ${ms} ms`);
    // Settle first, so an engine that resolves on abort cannot win the race.
    rejectResult(err);
    scope.abort(err);
  });
  let running: Promise<T>;
  try {
    running = work(scope);
  } catch (e) {
    running = Promise.reject(e);
  }
  // One reaction does everything when the work stops (a result already rejected at the deadline
  // ignores the late value): fewer promises per request than a race, a finally and a then each.
  const stopped = () => {
    deadline.cancel();
    unwatch();
    onStopped?.();
  };
  const settled = running.then(
    (value) => {
      resolveResult(value);
      stopped();
    },
    (e: unknown) => {
      rejectResult(e);
      stopped();
    },
  );
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
