/**
 * One image request from a validated job to a verified image:
 *   find the engine → balance check → gate admission → decode the inputs → charge (the model's
 *   price, one txn) → engine (deadline, AbortSignal) → verify the bytes → markSucceeded, or
 *   refundOnce on any failure → release the permit.
 * The part after the charge runs detached from the HTTP request (tracked as background work),
 * so a client that disconnects does not stop it and the request record shows the outcome.
 * Failures are thrown as they are (GateRejected, InsufficientCreditsError, ImageInputError,
 * EngineError…); http/errorMapping turns them into answers and history rows.
 */
import { assertCanPay, type IdempotencyClaim, type ImageCharge, type NewTask, type WriteAttempt } from "./store";
import { resultForStorage } from "./imageResult";
import { ClientDisconnected, NoEngineError, type FlowDeps } from "./requestFlow";
import { EngineError, EngineOutputInvalid, type GeneratedImage, type ImageEngine, type ImageJob } from "./engine";
import { withDeadline } from "./deadline";
import { describeSource } from "./models";
import { verifyDecodesOffThread } from "./image/codec";
import { assertDecodable, ImageInputError, sniffImageMime } from "./imageInput";
import { readDimensions } from "./image/dimensions";
import type { ImageRequestKind } from "./imageRequest";
import type { ArchivedImage, ImageKeeper } from "./imageArchive";
import { settleLostCharge } from "./lostCharges";

export interface ImageRequest {
  requestId: string;
  userId: number;
  keyId: number | null;
  kind: ImageRequestKind;
  job: Omit<ImageJob, "signal">;
  /** The request is a task (async, streamed, or with an Idempotency-Key): its row and result are kept. */
  task?: TaskOptions;
  /**
   * Gives back the memory of the input images the caller owns (uploads read from the request's
   * body, tens of MB each), called once the engine has stopped with them, even past the
   * deadline: they would otherwise wait for a garbage collection, which an idle server may not
   * run for a long time, and during a burst add up with the next requests' uploads. Must not
   * throw (withDeadline's onStopped).
   */
  releaseInputs?: () => void;
}

export interface TaskOptions {
  row: NewTask;
  idempotency?: IdempotencyClaim;
  /** How long the task's result (or error) stays readable after it ends. */
  retentionMs: number;
}

export interface ImageOutcome {
  image: GeneratedImage;
  /** Time spent waiting in the gate's queue. */
  queueMs: number;
  /** The engine's own time (queue wait and verification excluded). */
  generationMs: number;
  /** The image as kept in the archive; absent when there is no archive or keeping it failed. */
  stored?: ArchivedImage;
}

export interface ImageFlowDeps extends FlowDeps {
  /** How long the answer waits for another process's database write lock (see store/busy). */
  busyWaitMs: number;
  /** Where every successful output is kept (core/imageArchive). */
  images?: ImageKeeper;
  /** Told how long each charged request waited, generated and spent upstream (the metrics). */
  observeTimings?: (timings: ImageTimings) => void;
}

/** The durations of one charged image request, in milliseconds; upstreamMs only for upstream engines. */
export interface ImageTimings {
  kind: ImageRequestKind;
  queueMs: number;
  generationMs: number;
  upstreamMs: number | null;
}

/**
 * Runs the whole flow. Throws before the charge (nothing to refund) or after it (refunded
 * exactly once before the error reaches the caller).
 */
export async function runImageRequest(deps: ImageFlowDeps, req: ImageRequest, clientSignal?: AbortSignal): Promise<ImageOutcome> {
  const { store } = deps;
  // A model without an engine can never succeed: refused before anything is charged.
  const engine = deps.engines.imageEngine(req.job.model);
  if (!engine) throw new NoEngineError(`no engine is registered for ${describeSource(req.job.model.source)} (model ${req.job.model.id})`);
  // Checked before queueing so a broke user never takes a queue slot; the charge re-checks atomically.
  assertCanPay(await store.credits.balance(req.userId), req.job.model.price);

  const permit = await deps.gate.admit(req.userId, clientSignal);
  try {
    await checkInputs(engine, req);
    // The client that left while it was admitted (or while its inputs were checked) would pay
    // for an answer nobody reads: the last moment to let it go for free.
    if (clientSignal?.aborted) throw new ClientDisconnected("the client closed the connection before the charge");
    await chargeImage(deps, req);
  } catch (e) {
    permit.release();
    throw e;
  }
  // From here on the credit is spent: the generation finishes (or is refunded) on its own,
  // whatever the client does. The permit is given back when the engine really stops
  // (withDeadline's onStopped), not when the answer settles at the deadline: an engine that
  // ignores its signal would otherwise run beside the next one admitted, past the limit. The
  // graceful stop waits for both: the engine, and the record of the outcome after it.
  const { background } = deps;
  background.begin(); // one count, ended by whichever of the two comes last
  let left = 2;
  const done = () => void (--left === 0 && background.end());
  const work = generateCharged(deps, req, engine, permit.waitedMs, undefined, () => {
    permit.release();
    done();
  });
  work.then(done, done);
  return work;
}

/**
 * Charges the request (one transaction). A lock held past busyWaitMs ends in
 * DatabaseBusyError: nothing was charged. A connection lost around the COMMIT leaves the
 * outcome unknown: the error goes to the client (503, nothing changed) and the charge, if it
 * landed, is refunded in the background (core/lostCharges).
 */
export async function chargeImage(deps: ImageFlowDeps, req: ImageRequest): Promise<void> {
  const { store } = deps;
  try {
    await store.whenWritable(() => store.credits.chargeForImage(chargeOf(req), deps.clock()), { maxWaitMs: deps.busyWaitMs });
  } catch (e) {
    if (store.isConnectionLost(e)) settleLostCharge(deps, { requestId: req.requestId, userId: req.userId, ...(req.task ? { taskRetentionMs: req.task.retentionMs } : {}) });
    throw e;
  }
}

/** The charge of a request (with its task row and key claim, when it is a task). */
export function chargeOf(req: ImageRequest): ImageCharge {
  return {
    requestId: req.requestId,
    userId: req.userId,
    keyId: req.keyId,
    kind: req.kind,
    model: req.job.model.id,
    price: req.job.model.price,
    prompt: req.job.prompt,
    ...(req.task ? { task: req.task.row, idempotency: req.task.idempotency } : {}),
  };
}

/**
 * The part after the charge: engine, verification, then the success or the refund recorded.
 * Not the client's signal: a charged generation finishes whatever the client does; `cancel`
 * (an async task's cancel) aborts it and the refund records it as canceled.
 */
export async function generateCharged(
  deps: ImageFlowDeps,
  req: ImageRequest,
  engine: ImageEngine,
  queueMs: number,
  cancel?: AbortSignal,
  /** Called once when the engine has stopped (which may be after the deadline settled the answer). */
  onEngineStopped?: () => void,
): Promise<ImageOutcome> {
  let generationMs: number | null = null;
  try {
    const started = performance.now();
    let image: GeneratedImage;
    try {
      // The charge is made, so the inputs are never needed again once the engine stops (which
      // may be after the deadline): given back then.
      image = await withDeadline(
        deps.generationTimeoutMs,
        (scope) => {
          const job: ImageJob = { ...req.job, signal: scope.signal };
          return req.kind === "edit" ? engine.edit(job) : engine.generate(job);
        },
        cancel,
        () => {
          req.releaseInputs?.();
          onEngineStopped?.();
        },
      ).result;
    } catch (e) {
      generationMs = Math.round(performance.now() - started);
      const upstreamMs = e instanceof EngineError ? (e.trace?.upstreamLatencyMs ?? null) : null;
      deps.observeTimings?.({ kind: req.kind, queueMs, generationMs, upstreamMs });
      throw e;
    } finally {
      generationMs = Math.round(performance.now() - started);
    }
    deps.observeTimings?.({ kind: req.kind, queueMs, generationMs, upstreamMs: image.trace?.upstreamLatencyMs ?? null });
    if (cancel?.aborted) throw new TaskCanceled();
    await verifyOutput(image);
    const stored = await keepImage(deps, req, image);
    const outcome: ImageOutcome = { image, queueMs, generationMs, ...(stored ? { stored } : {}) };
    await recordSuccess(deps, req, outcome);
    return outcome;
  } catch (e) {
    const failure = cancel?.aborted ? new TaskCanceled() : e;
    await recordFailure(deps, req, failure, queueMs, generationMs);
    throw failure;
  }
}

/**
 * Keeps the verified image in the archive before its success is recorded (so a task's result
 * can name it). A failure to keep it does not fail the request: the image is paid for and
 * delivered inline; only its id (and a URL answer) are missing.
 */
async function keepImage(deps: ImageFlowDeps, req: ImageRequest, image: GeneratedImage): Promise<ArchivedImage | undefined> {
  if (!deps.images) return undefined;
  try {
    return await deps.images.put({ requestId: req.requestId, userId: req.userId, bytes: image.bytes, mime: image.mime, width: image.width, height: image.height });
  } catch (e) {
    deps.logger.error("could not keep a generated image; delivering it inline", { request_id: req.requestId, error: String(e) });
    return undefined;
  }
}

/** An async task canceled by its owner (queued, or aborted while running); refunded. */
export class TaskCanceled extends Error {
  override name = "TaskCanceled";
  constructor() {
    super("The task was canceled; its credit was refunded.");
  }
}

/**
 * Marks the request succeeded. A finished image is delivered even while another process holds
 * the database's write lock: the answer waits up to busyWaitMs, then the record keeps retrying
 * in the background (if the process stops first, the row is still pending and the next start
 * refunds it: the client then got its image for free, never charged for nothing).
 */
async function recordSuccess(deps: ImageFlowDeps, req: ImageRequest, outcome: ImageOutcome): Promise<void> {
  const t = outcome.image.trace;
  const task = req.task ? { result: resultForStorage(req.requestId, outcome, req.job, deps.clock()), expiresAt: deps.clock() + req.task.retentionMs } : undefined;
  const details = { queueMs: Math.round(outcome.queueMs), generationMs: outcome.generationMs, upstreamId: t?.upstreamId, accountId: t?.accountId, attempts: t?.attempts, upstreamLatencyMs: t?.upstreamLatencyMs, task };
  // A run after a lost connection that finds the row already succeeded is this one's (markSucceeded).
  const recorded = deps.background.track(deps.store.whenWritable((attempt) => deps.store.requests.markSucceeded(req.requestId, details, deps.clock(), attempt), { maxWaitMs: Infinity }));
  const ok = await landsWithin(recorded, deps.busyWaitMs);
  if (ok === false) throw new Error(`request ${req.requestId} was no longer pending when it succeeded`);
  if (ok === "later") {
    deps.logger.warn("database locked: delivering the image before its success is recorded", { request_id: req.requestId });
    recorded.then(
      (late) => late || deps.logger.error("request was no longer pending when its success was recorded", { request_id: req.requestId }),
      (e) => deps.logger.error("could not record an image success", { request_id: req.requestId, error: String(e) }),
    );
  }
}

/** Records the failure and refunds exactly once; like recordSuccess, a locked database delays only the record, not the answer. Never throws. */
export async function recordFailure(deps: ImageFlowDeps, req: ImageRequest, e: unknown, queueMs: number, generationMs: number | null): Promise<void> {
  const { store, logger } = deps;
  const failure = deps.describeFailure(e);
  // One time for every run: a run after a lost connection recognises its own refund by it (refundOnce).
  const now = deps.clock();
  const refund = async (attempt: WriteAttempt) => {
    if (e instanceof EngineError && e.trace) await store.requests.recordTrace(req.requestId, e.trace);
    const task = req.task
      ? {
          status: e instanceof TaskCanceled ? ("canceled" as const) : ("failed" as const),
          error: { message: failure.message, type: failure.type ?? "server_error", param: failure.param ?? null, code: failure.code },
          expiresAt: now + req.task.retentionMs,
        }
      : undefined;
    return store.credits.refundOnce(
      req.requestId,
      { status: "failed", errorCode: failure.code, errorMessage: failure.message, errorDetail: failure.detail ?? null, queueMs: Math.round(queueMs), generationMs, task },
      now,
      attempt,
    );
  };
  const recorded: Promise<boolean> = deps.background.track(deps.store.whenWritable(refund, { maxWaitMs: Infinity }));
  // The engine's own words (upstream, account, transport error) are for admins: the log and the history row (error_detail) keep them.
  const logOutcome = (refunded: boolean) =>
    logger.warn("image request failed", { request_id: req.requestId, user_id: req.userId, error_code: failure.code, refunded, ...(failure.detail ? { detail: failure.detail } : {}) });
  // The row stays pending when this fails for good; recoverInterrupted refunds it at the next start.
  const logError = (recordError: unknown) => logger.error("could not record an image failure", { request_id: req.requestId, error: String(recordError) });
  try {
    const refunded = await landsWithin(recorded, deps.busyWaitMs);
    if (refunded === "later") recorded.then(logOutcome, logError);
    else logOutcome(refunded);
  } catch (recordError) {
    logError(recordError);
  }
}

/** The promise's value if it settles within ms, else "later" (it goes on). */
async function landsWithin<T>(work: Promise<T>, ms: number): Promise<T | "later"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const later = new Promise<"later">((resolve) => (timer = setTimeout(() => resolve("later"), ms)));
  try {
    return await Promise.race([work, later]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The expensive input checks (full decodes, in the decode pool) run once a gate slot is held,
 * so the gate bounds them, but before the charge, so a corrupt upload is a 400 that costs
 * nothing; then the engine's own limits (headers only).
 */
export async function checkInputs(engine: ImageEngine, req: ImageRequest): Promise<void> {
  const { images, mask } = req.job;
  const paramOf = (i: number | "mask") => (i === "mask" ? (mask?.param ?? "mask") : (images[i]?.param ?? `image[${i}]`));
  // One at a time: a request with many images does not take the whole decode pool.
  for (const [i, image] of images.entries()) await assertDecodable(image, paramOf(i));
  if (mask) await assertDecodable(mask, paramOf("mask"));
  const problem = engine.inputProblem?.(req.job, req.kind);
  if (problem) throw new ImageInputError(`'${paramOf(problem.image)}': ${problem.message}.`, paramOf(problem.image), "image_not_supported");
}

/** The engine's bytes must be a PNG/JPEG/WebP of the size it reports. */
async function verifyOutput(image: GeneratedImage): Promise<void> {
  if (!(image.bytes instanceof Uint8Array) || image.bytes.byteLength === 0) throw new EngineOutputInvalid("the engine returned no image bytes");
  const mime = sniffImageMime(image.bytes);
  if (!mime) throw new EngineOutputInvalid("the engine's bytes are not a PNG, JPEG or WebP image");
  if (mime !== image.mime) throw new EngineOutputInvalid(`the engine reported ${image.mime} but returned ${mime}`);
  const dims = readDimensions(image.bytes, mime);
  if (!dims || dims.width !== image.width || dims.height !== image.height) {
    throw new EngineOutputInvalid(`the engine reported ${image.width}x${image.height} but the image header says ${dims ? `${dims.width}x${dims.height}` : "nothing readable"}`);
  }
  // A full decode (in the decode pool, bounded by the header like any input): a valid header
  // over truncated, corrupt or bomb data must not be charged for.
  let decoded: { width: number; height: number };
  try {
    decoded = await verifyDecodesOffThread(image.bytes, mime);
  } catch (e) {
    throw new EngineOutputInvalid(`the engine's ${mime} does not decode: ${(e as Error).message}`);
  }
  if (decoded.width !== image.width || decoded.height !== image.height) {
    throw new EngineOutputInvalid(`the engine reported ${image.width}x${image.height} but the image decodes to ${decoded.width}x${decoded.height}`);
  }
}
