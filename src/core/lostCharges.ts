/**
 * A charge whose COMMIT may or may not have landed: on PostgreSQL the connection can break
 * around it (a network blip, a pooler restart), and then the server cannot tell whether the
 * request row, its credit and its ledger row were committed. The client is answered 503
 * "nothing was changed" and may retry, so that answer is made true: the request is settled in
 * the background, refunded once if its charge committed, nothing written if not
 * (store refundLostCharge), retried with whenWritable's bounded backoff until the database
 * answers.
 *
 * Why settle this one request rather than sweep this instance's stale pending rows: its id is
 * known here, and no other part of the server holds it (the flow stopped before the engine),
 * so nothing can mark it succeeded later. The refund is conditional on 'pending', like every
 * refund, so it lands at most once even against another instance's sweep (should this one stop
 * first) or a task runner that claimed a queued task meanwhile (its success then finds the
 * request refunded, and changes nothing). The graceful stop waits for the settling within its
 * grace; past it, the row (still pending, owned by this instance) is refunded as interrupted
 * by the others' sweep or by this instance's next start.
 */
import type { ImageFlowDeps } from "./imageRequests";
import type { FailedOutcome } from "./store";

/** What the settled request's record (and a task's error) says. */
const LOST_CHARGE_MESSAGE = "The database could not be reached while the request was charged; the charge was undone.";

export interface LostCharge {
  requestId: string;
  userId: number;
  /** A task's: how long its record stays readable after it ends. */
  taskRetentionMs?: number;
}

/** Starts settling the charge in the background (tracked: a graceful stop waits for it); never rejects. */
export function settleLostCharge(deps: Pick<ImageFlowDeps, "store" | "background" | "logger" | "clock">, charge: LostCharge): void {
  const { store, logger } = deps;
  const outcome = (at: number): FailedOutcome => ({
    status: "failed",
    errorCode: "database_unavailable",
    errorMessage: LOST_CHARGE_MESSAGE,
    ...(charge.taskRetentionMs !== undefined
      ? { task: { status: "failed", error: { message: LOST_CHARGE_MESSAGE, type: "server_error", param: null, code: "database_unavailable" }, expiresAt: at + charge.taskRetentionMs } }
      : {}),
  });
  // One time for every run: a run after a lost connection recognises its own refund by it.
  const now = deps.clock();
  const settled = store.whenWritable((attempt) => store.credits.refundLostCharge(charge, outcome(now), now, attempt), { maxWaitMs: Infinity });
  deps.background.track(settled).then(
    (refunded) => logger.log(refunded ? "warn" : "info", "settled a charge whose commit was lost", { request_id: charge.requestId, user_id: charge.userId, refunded }),
    // Not a connection loss (those are retried): the row, if any, stays pending, refunded as
    // interrupted at this instance's next start or by another's sweep once this one stops.
    (e) => logger.error("could not settle a charge whose commit was lost", { request_id: charge.requestId, error: String(e) }),
  );
}
