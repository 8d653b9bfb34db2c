/**
 * Async image tasks: accepted (charged) at once, queued durably in the store, run in the
 * background within their own bounds (per instance, and per user across instances, so a burst
 * of async work cannot starve the synchronous path), cancelable, and announced when they end.
 *
 *   submit: engine? → bounds → decode the inputs → charge + task row + inputs (+ key), one txn
 *   run:    claim (queued → running) → generateCharged (engine, verify, success or refund)
 *           → announce (TaskEventSink)
 *   cancel: queued → refunded at once; running → the cancel is recorded on the task, and the
 *           instance that runs it (this one or another sharing the database) aborts it, which
 *           refunds it (generateCharged)
 * Tasks still queued when the server stops run after the restart; a task that was running is
 * refunded as interrupted by the store's recovery at start.
 */
import type { ImageEngine, ImageInput, ImageJob } from "./engine";
import type { ImageTaskObject, TaskEventSink } from "./tasks";
import { resultFromStorage, type ImageResultBody } from "./imageResult";
import { chargeImage, checkInputs, generateCharged, recordFailure, TaskCanceled, type ImageFlowDeps, type ImageRequest } from "./imageRequests";
import { NoEngineError } from "./requestFlow";
import type { ModelDirectory } from "./imageRequest";
import { describeSource, type CatalogModel } from "./models";
import { assertAsyncRoom, assertCanPay, type IdempotencyClaim, type StoredJob, type TaskInput, type TaskRow } from "./store";
import { timerDelay } from "./timerDelay";

export { TaskQueueFull } from "./store";

export interface AsyncLimits {
  /** Async tasks running at once on this instance. */
  concurrency: number;
  /** Async tasks running at once for one user, on every instance sharing the store. */
  perUserConcurrency: number;
  /** Async tasks queued or running, server-wide; beyond it TaskQueueFull. */
  queueSize: number;
  /** Async tasks queued or running for one user. */
  perUserQueueSize: number;
}

export interface TaskRunnerDeps extends ImageFlowDeps {
  catalog: ModelDirectory;
  events: TaskEventSink;
  limits: AsyncLimits;
  /** How long a finished task stays readable. */
  retentionMs: number;
  /**
   * Look for queued tasks this often besides the kicks of this process (0: never). Instances
   * sharing a database see each other's queue only this way.
   */
  pollMs?: number;
}

/** No such task for this user (never existed, someone else's, or expired). */
export class TaskNotFound extends Error {
  override name = "TaskNotFound";
  constructor(
    readonly taskId: string,
    readonly expired = false,
  ) {
    super(`no task ${taskId}`);
  }
}

/** The task has already ended (succeeded, failed or canceled) and cannot be canceled. */
export class TaskNotCancelable extends Error {
  override name = "TaskNotCancelable";
}

/**
 * While this instance runs tasks, how often it looks for cancels of them asked for anywhere (a
 * cancel that reaches another instance of the deployment is only recorded on the task).
 */
const CANCEL_WATCH_MS = 1_000;
/**
 * How long a cancel of a running task waits for it to end before answering it as it then is
 * (running, with cancel_requested_at): a few of its owner's looks, and an engine that stops on
 * its abort signal. One that does not stops when it answers, or at its deadline.
 */
const CANCEL_WAIT_MS = 5_000;
/** How soon a pass that failed (store busy or unreachable) is tried again. */
const KICK_RETRY_MS = 1_000;
/** How often the cancel looks whether a task another instance runs has ended. */
const CANCEL_POLL_MS = 250;

export interface AsyncSubmission {
  request: ImageRequest;
  idempotency?: IdempotencyClaim;
  webhookUrl?: string | null;
}

export class TaskRunner {
  /** The tasks this instance runs; `settled` when one is recorded, refunded or not, and announced. */
  private readonly running = new Map<string, { userId: number; cancel: AbortController; settled: Promise<void> }>();
  private readonly progress = new Map<string, number>();
  private stopped = true;
  /** kick()'s pass not yet started (later kicks share it), and the last pass queued. */
  private nextPass: Promise<void> | null = null;
  private lastPass: Promise<void> = Promise.resolve();
  private sweep: ReturnType<typeof setInterval> | undefined;
  private poll: ReturnType<typeof setInterval> | undefined;
  /** Looks for cancels of the tasks this instance runs, while it runs any. */
  private cancelWatch: ReturnType<typeof setInterval> | undefined;
  private watching = false;

  constructor(private readonly deps: TaskRunnerDeps) {}

  /** How long a finished task stays readable ([tasks] retention_hours), for every kind of task. */
  get retentionMs(): number {
    return this.deps.retentionMs;
  }

  /** Starts running queued tasks (those left from before a restart included) and the expiry sweep. */
  start(): void {
    this.stopped = false;
    void this.kick();
    this.sweep = setInterval(() => this.expireOld(), 60_000);
    // In a task of its own, not inside the caller's chain of awaits: an async SQLite transaction
    // begun there would still be open when the caller goes on, and a second store opened in this
    // process (tests run two servers on one file) would wait synchronously for its lock, forever.
    setTimeout(() => this.expireOld(), 0).unref?.();
    if (this.deps.pollMs) this.poll = setInterval(() => void this.kick(), this.deps.pollMs);
  }

  /** Stops starting tasks; running ones finish (the graceful stop waits for background work). */
  stop(): void {
    this.stopped = true;
    clearInterval(this.sweep);
    clearInterval(this.poll);
  }

  /** Accepts an async task: checked and charged now, run later. Returns its row. */
  async submit(sub: AsyncSubmission): Promise<TaskRow> {
    const { deps } = this;
    const req = sub.request;
    const engine = deps.engines.imageEngine(req.job.model);
    if (!engine) throw new NoEngineError(`no engine is registered for ${describeSource(req.job.model.source)} (model ${req.job.model.id})`);
    assertCanPay(await deps.store.credits.balance(req.userId), req.job.model.price);
    // Checked first so a full queue costs no decoding; the charge checks again, atomically.
    await this.checkBounds(req.userId);
    // Decoded now, before the charge: a corrupt upload is a 400 that costs nothing.
    await checkInputs(engine, req);
    const row = {
      mode: "async" as const,
      status: "queued" as const,
      endpoint: req.kind === "edit" ? ("edits" as const) : ("generations" as const),
      model: req.job.model.id,
      job: storedJob(req.job),
      inputs: storedInputs(req.job),
      webhookUrl: sub.webhookUrl ?? null,
      // Re-checked inside the charge: two submissions racing for the last place cannot both pass.
      queueLimits: { queueSize: deps.limits.queueSize, perUserQueueSize: deps.limits.perUserQueueSize },
    };
    const charged: ImageRequest = { ...req, task: { row, idempotency: sub.idempotency, retentionMs: deps.retentionMs } };
    await chargeImage(deps, charged);
    // The answer shows the task as the runner left it: started at once when there is room.
    await this.kick();
    return (await deps.store.tasks.get(req.requestId))!;
  }

  /**
   * Cancels a queued task (refunded at once) or a running one: recorded on the task, aborted by
   * the instance that runs it (this one at once, another at its next look), then refunded. The
   * answer waits a bounded time for that and shows the task as it then is: canceled, still
   * running with cancel_requested_at (its engine has not stopped yet, or its owner has not looked
   * yet), or succeeded when its image was finished first. TaskNotCancelable once it has ended.
   */
  async cancel(userId: number, taskId: string): Promise<TaskRow> {
    const { deps } = this;
    const task = await deps.store.tasks.get(taskId);
    if (!task || task.user_id !== userId || task.mode !== "async") throw new TaskNotFound(taskId);
    // Each attempt fails only when the task has just ended (a queued one's request is no longer
    // pending, a running one no longer running): then it is not cancelable.
    if (task.status === "queued" && (await this.cancelQueued(taskId))) return (await deps.store.tasks.get(taskId))!;
    if (task.status === "running" && (await deps.store.whenWritable(() => deps.store.tasks.requestCancel(taskId, deps.clock()), { maxWaitMs: deps.busyWaitMs }))) {
      await this.awaitCanceled(taskId);
      return (await deps.store.tasks.get(taskId))!;
    }
    const ended = (await deps.store.tasks.get(taskId))!;
    throw new TaskNotCancelable(`the task has already ${ended.status}`);
  }

  /** Refunds a queued task as canceled; false when its request was no longer pending (it ended). */
  private async cancelQueued(taskId: string): Promise<boolean> {
    const { deps } = this;
    const description = deps.describeFailure(new TaskCanceled());
    const error = { message: description.message, type: description.type ?? "invalid_request_error", param: null, code: description.code };
    const refunded = await deps.store.whenWritable(
      () => deps.store.credits.refundOnce(taskId, { status: "failed", errorCode: description.code, errorMessage: description.message, task: { status: "canceled", error, expiresAt: deps.clock() + deps.retentionMs } }, deps.clock()),
      { maxWaitMs: deps.busyWaitMs },
    );
    if (!refunded) return false;
    // A runner that claimed it meanwhile stops it (this one now; another when it next looks):
    // the refund has already ended it.
    this.running.get(taskId)?.cancel.abort();
    this.announce(taskId);
    return true;
  }

  /**
   * A running task whose cancel is recorded: aborted here when this instance runs it, else by
   * its owner. Waits (at most CANCEL_WAIT_MS) for this task's own end only, never for the
   * server's other work.
   */
  private async awaitCanceled(taskId: string): Promise<void> {
    const mine = this.running.get(taskId);
    if (mine) {
      mine.cancel.abort();
      await settlesWithin(mine.settled, CANCEL_WAIT_MS);
      return;
    }
    const until = performance.now() + CANCEL_WAIT_MS;
    while (performance.now() < until && (await this.deps.store.tasks.get(taskId))?.status === "running") await Bun.sleep(CANCEL_POLL_MS);
  }

  /** Aborts the tasks this instance runs whose cancel was recorded elsewhere (or that ended elsewhere). */
  private async abortCanceled(): Promise<void> {
    if (this.watching || this.running.size === 0) return;
    this.watching = true;
    try {
      for (const id of await this.deps.store.tasks.toAbort([...this.running.keys()])) this.running.get(id)?.cancel.abort();
    } catch (e) {
      this.deps.logger.warn("could not look for canceled tasks; the next look retries", { error: String(e) });
    } finally {
      this.watching = false;
    }
  }

  /**
   * Progress of a task this runner does not run (a streamed request), so that GET shows it too.
   */
  followProgress(taskId: string): { report: (fraction: number) => void } {
    // Forgotten once the task can no longer be running (the engine's deadline has passed).
    const forget = setTimeout(() => this.progress.delete(taskId), timerDelay(this.deps.generationTimeoutMs + 60_000));
    forget.unref?.();
    return { report: (fraction) => void this.progress.set(taskId, fraction) };
  }

  /**
   * The task as the API shows it: queue place while queued, progress while running, the result
   * with its image. `withImage: false` (the list, webhooks) leaves the image out, read from
   * nowhere: the result names it (image_id) and GET of the task returns it.
   */
  async describe(task: TaskRow, opts: { withImage?: boolean } = {}): Promise<ImageTaskObject> {
    const seconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));
    const object: ImageTaskObject = {
      id: task.id,
      object: "image.task",
      status: task.status,
      created_at: Math.floor(task.created_at / 1000),
      started_at: seconds(task.started_at),
      finished_at: seconds(task.finished_at),
      model: task.model,
      endpoint: task.endpoint,
    };
    if (task.status === "queued") object.queue_position = await this.deps.store.tasks.queuePosition(task.id);
    if (task.status === "running" && this.progress.has(task.id)) object.progress = this.progress.get(task.id);
    if (task.cancel_requested_at != null) object.cancel_requested_at = Math.floor(task.cancel_requested_at / 1000);
    // The image comes back from the image store; gone (deleted, or over the storage budget), the
    // task has no result to show.
    if (task.result) {
      const result = opts.withImage === false ? withoutImage(task.result, task.id) : await resultFromStorage(task.result, this.deps.images, task.id);
      if (result) object.result = result;
    }
    if (task.error) object.error = JSON.parse(task.error) as ImageTaskObject["error"];
    return object;
  }

  /** The user's task, or TaskNotFound (task_expired once its retention has passed). */
  async taskOf(userId: number, taskId: string): Promise<TaskRow> {
    const task = await this.deps.store.tasks.get(taskId);
    if (!task || task.user_id !== userId) throw new TaskNotFound(taskId);
    if (task.expired) throw new TaskNotFound(taskId, true);
    return task;
  }

  private async checkBounds(userId: number): Promise<void> {
    assertAsyncRoom(await this.deps.store.tasks.asyncLoad(userId), this.deps.limits);
  }

  /**
   * Starts queued tasks while the bounds allow. Passes run one after another (their reads and
   * claims are asynchronous, and two at once would both count the same free slots); kicks that
   * arrive before the next pass starts share it. Resolves when that pass is done; never rejects.
   */
  private kick(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.nextPass) return this.nextPass;
    const pass = this.lastPass.then(async () => {
      this.nextPass = null;
      try {
        await this.startQueued();
      } catch (e) {
        // (A locked SQLite file, a lost connection.) Tried again shortly: on SQLite nothing polls,
        // and on an idle server no other kick might come before a task waits for ever.
        this.deps.logger.warn("could not start queued tasks; trying again shortly", { error: String(e) });
        if (!this.stopped) setTimeout(() => void this.kick(), KICK_RETRY_MS).unref?.();
      }
    });
    this.nextPass = pass;
    this.lastPass = pass;
    return this.deps.background.track(pass);
  }

  /**
   * One pass: queued tasks oldest first, skipping users at their own limit. A user whose task
   * could not be claimed while it stays queued (at the limit on another instance, or a row busy)
   * is passed over for the rest of the pass: each claim of theirs would cost a transaction for
   * the same answer.
   */
  private async startQueued(): Promise<void> {
    const { limits } = this.deps;
    if (this.running.size >= limits.concurrency) return;
    const passedOver = new Set<number>();
    for (const task of await this.deps.store.tasks.queued()) {
      if (this.stopped || this.running.size >= limits.concurrency) return;
      if (passedOver.has(task.user_id)) continue;
      const mine = [...this.running.values()].filter((r) => r.userId === task.user_id).length;
      if (mine >= limits.perUserConcurrency) continue;
      // The store counts the user's tasks running on every instance (this count is this one's only).
      if (!(await this.deps.store.tasks.start(task.id, this.deps.clock(), task.user_id, limits.perUserConcurrency))) {
        // Only when the task is still queued (the user at the limit, or a row busy): one canceled
        // or claimed meanwhile says nothing of the user's others, which may run now (on SQLite no
        // poll would try them again before the next event).
        if ((await this.deps.store.tasks.get(task.id))?.status === "queued") passedOver.add(task.user_id);
        continue;
      }
      this.run(task);
    }
  }

  private run(task: TaskRow): void {
    const cancel = new AbortController();
    const settled = Promise.withResolvers<void>();
    this.running.set(task.id, { userId: task.user_id, cancel, settled: settled.promise });
    if (!this.cancelWatch) {
      this.cancelWatch = setInterval(() => void this.abortCanceled(), CANCEL_WATCH_MS);
      this.cancelWatch.unref?.();
    }
    const engineStopped = Promise.withResolvers<void>();
    const work = this.execute(task, cancel.signal, engineStopped.resolve)
      .catch(() => {}) // only generateCharged's rejection reaches here, recorded and refunded by it; announced below
      .finally(() => {
        this.progress.delete(task.id);
        this.announce(task.id);
        settled.resolve();
      });
    // The task's slot (async_concurrency) and the graceful stop's count are held until its
    // engine has stopped too: the outcome is recorded at the deadline, but an engine that
    // ignores its signal would otherwise run beside the next task started, past the limit.
    const freed = Promise.all([work, engineStopped.promise]).then(() => {
      this.running.delete(task.id);
      if (this.running.size === 0) {
        clearInterval(this.cancelWatch);
        this.cancelWatch = undefined;
      }
      void this.kick();
    });
    this.deps.background.track(freed);
  }

  /**
   * Runs a claimed task. From the claim on its credit is spent and nobody else will refund it
   * while this instance lives: every failure, before the engine as in it, fails the task and
   * refunds it once.
   */
  private async execute(task: TaskRow, cancel: AbortSignal, onEngineStopped: () => void): Promise<void> {
    const { deps } = this;
    const queueMs = (task.started_at ?? deps.clock()) - task.created_at;
    let prepared: { request: ImageRequest; engine: ImageEngine };
    try {
      prepared = await this.prepare(task);
    } catch (e) {
      // The store unreachable while the inputs are read, a stored job that no longer parses: the
      // cause is ours, so the log keeps it (the task's error says only "internal error").
      deps.logger.error("an async task failed before its engine ran", { request_id: task.id, error: String(e) });
      onEngineStopped(); // none ran
      await recordFailure(deps, this.requestOf(task, null), cancel.aborted ? new TaskCanceled() : e, queueMs, null);
      return;
    }
    await generateCharged(deps, prepared.request, prepared.engine, queueMs, cancel, onEngineStopped);
  }

  /** The claimed task's request (its inputs read back from the store) and the engine that makes it. */
  private async prepare(task: TaskRow): Promise<{ request: ImageRequest; engine: ImageEngine }> {
    const { deps } = this;
    const stored = JSON.parse(task.job ?? "null") as StoredJob | null;
    const model = stored ? deps.catalog.get(stored.model) : undefined;
    const onProgress = (r: { fraction?: number }) => void (r.fraction !== undefined && this.progress.set(task.id, r.fraction));
    const job = stored && model ? { model, prompt: stored.prompt, size: stored.size, quality: stored.quality, extra: stored.extra, ...inputsOf(await deps.store.tasks.inputs(task.id)), onProgress } : null;
    // The configuration changed while the task waited (its model or engine is gone): it fails
    // and is refunded like any engine failure.
    const engine = (model && deps.engines.imageEngine(model)) || goneEngine(task.model);
    return { request: this.requestOf(task, job), engine };
  }

  /** The request of a claimed task; without a job, one that only records the task's failure (nothing is generated). */
  private requestOf(task: TaskRow, job: ImageRequest["job"] | null): ImageRequest {
    return {
      requestId: task.id,
      userId: task.user_id,
      keyId: null,
      kind: task.endpoint === "edits" ? "edit" : "generate",
      job: job ?? { model: { ...GONE_MODEL, id: task.model }, prompt: "", size: null, quality: "auto", images: [], extra: {} },
      task: { row: { mode: "async", status: "running", endpoint: task.endpoint, model: task.model }, retentionMs: this.deps.retentionMs },
    };
  }

  private announce(taskId: string): void {
    void this.announceNow(taskId).catch((e) => this.deps.logger.error("could not record a task event", { request_id: taskId, error: String(e) }));
  }

  private async announceNow(taskId: string): Promise<void> {
    const task = await this.deps.store.tasks.get(taskId);
    if (!task || task.mode !== "async") return;
    const type = task.status === "succeeded" ? "image.task.succeeded" : task.status === "canceled" ? "image.task.canceled" : task.status === "failed" ? "image.task.failed" : null;
    if (!type) return;
    // Webhook payloads carry no image (receivers fetch the task): no need to read it back.
    const object = await this.describe(task, { withImage: false });
    this.deps.events.taskFinished({ type, userId: task.user_id, task: object, ...(task.webhook_url ? { webhookUrl: task.webhook_url } : {}) });
  }

  private expireOld(): void {
    // A locked database: the next sweep catches up.
    void this.deps.store.tasks.expire(this.deps.clock()).catch((e) => this.deps.logger.warn("task expiry sweep skipped", { error: String(e) }));
  }
}

/** Resolves when the work settles or after ms, whichever is first; never rejects. */
async function settlesWithin(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  try {
    await Promise.race([work.then(() => {}, () => {}), late]);
  } finally {
    clearTimeout(timer);
  }
}

const GONE_MODEL: CatalogModel = { id: "", kind: "image", ownedBy: "", created: 0, source: { kind: "builtin" }, upstreamModel: "", params: {}, price: 0 };

function goneEngine(model: string): ImageEngine {
  const fail = () => Promise.reject(new NoEngineError(`the model '${model}' is no longer served by this server`));
  return { generate: fail, edit: fail };
}


/** A stored result without its image (one that could not be kept is stored with it inline). */
function withoutImage(stored: string, taskId: string): ImageResultBody {
  const body = JSON.parse(stored) as ImageResultBody;
  return { ...body, id: taskId, data: body.data.map((d) => ({ revised_prompt: d.revised_prompt }) as ImageResultBody["data"][number]) };
}

function storedJob(job: Omit<ImageJob, "signal">): StoredJob {
  return { model: job.model.id, prompt: job.prompt, size: job.size, quality: job.quality, extra: job.extra };
}

function storedInputs(job: Omit<ImageJob, "signal">): TaskInput[] {
  const input = (role: TaskInput["role"], image: ImageInput, param: string): TaskInput => ({ role, param: image.param ?? param, mime: image.mime, width: image.width, height: image.height, bytes: image.bytes });
  return [...job.images.map((image, i) => input("image", image, `image[${i}]`)), ...(job.mask ? [input("mask", job.mask, "mask")] : [])];
}

function inputsOf(rows: TaskInput[]): { images: ImageInput[]; mask?: ImageInput } {
  const image = (r: TaskInput): ImageInput => ({ bytes: r.bytes, mime: r.mime, width: r.width, height: r.height, param: r.param });
  const mask = rows.find((r) => r.role === "mask");
  return { images: rows.filter((r) => r.role === "image").map(image), ...(mask ? { mask: image(mask) } : {}) };
}
