/**
 * Stopping a generation Atelier abandoned (its deadline passed, its attempt timed out, its async
 * task was canceled) on a WebUI that may also serve other clients. AUTOMATIC1111 and Forge run
 * an API request in a worker thread that carries on whether or not its HTTP client is still
 * there, so an abandoned generation keeps the GPU, and the WebUI's queue, until it ends.
 *
 * The WebUI's only stop, POST /sdapi/v1/interrupt, stops whatever runs now, whoever sent it. So
 * the attempt's task id (`force_task_id`) is looked up first with POST /internal/progress:
 *
 * - `active` (it is the WebUI's current task) → interrupted;
 * - `queued` (its request thread waits for the WebUI's queue lock) → left alone: nothing can
 *   take a request out of that queue (modules/call_queue.py queue_lock, a modules/fifo_lock.py
 *   FIFOLock, has no removal, and the thread does not notice its client is gone), and an
 *   interrupt sent now is lost, because the WebUI clears the flag when the next job begins
 *   (modules/shared_state.py State.begin). It will run in full when its turn comes;
 * - `completed`, or unknown to the WebUI (before 1.8.0 the API ignores `force_task_id`) → nothing;
 * - no answer, an error (404 from a WebUI started with `--nowebui`, which registers no
 *   /internal/progress) or an answer that is not a task state → nothing: never interrupted blindly.
 *
 * One window is left: the task may end between the look-up and the interrupt, and the next job
 * (another client's) begin, which then receives it. It is as wide as one request to the WebUI.
 *
 * Both calls share one short time limit and use the attempt's account (its credentials).
 */
import type { PoolAccountConfig } from "../pool";
import { taskStateFromWebUiAnswer, type WebUiTaskState } from "./parse";
import type { WebUiTransport } from "./transport";

/**
 * How long the look-up and the interrupt may take together. The attempt waits for them (the
 * engine stops only then), so this bounds how long an abandoned attempt holds its capacity; it
 * stays under the 5 s a task's cancel waits for the task to end (core/taskRunner CANCEL_WAIT_MS).
 */
export const STOP_ABANDONED_TIMEOUT_MS = 3_000;

export type AbandonedTask =
  | { outcome: "interrupted" }
  | { outcome: Exclude<WebUiTaskState, "active"> }
  /** The state could not be learnt, or the interrupt failed: `reason` is the upstream's text (redacted by the transport) or the error's. */
  | { outcome: "unchecked" | "interrupt-failed"; reason: string };

/** Interrupts the task if, and only if, the WebUI says it is the one running. Never throws. */
export async function stopAbandonedTask(transport: WebUiTransport, account: PoolAccountConfig, taskId: string): Promise<AbandonedTask> {
  const signal = AbortSignal.timeout(STOP_ABANDONED_TIMEOUT_MS);
  let state: WebUiTaskState | null;
  try {
    state = taskStateFromWebUiAnswer(await transport.taskState(account, taskId, signal));
  } catch (e) {
    return { outcome: "unchecked", reason: errorText(e) };
  }
  if (state === null) return { outcome: "unchecked", reason: "the answer of /internal/progress is not a task state" };
  if (state !== "active") return { outcome: state };
  try {
    await transport.interrupt(account, signal);
  } catch (e) {
    return { outcome: "interrupt-failed", reason: errorText(e) };
  }
  return { outcome: "interrupted" };
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
