/**
 * The engine of every queue API (fal, Replicate, Black Forest Labs): one attempt is
 *
 *   submit the job → poll its status with backoff → (fetch the result document) → download
 *   the image → bytes to our client
 *
 * run by the upstream's account pool. Each provider is a small translator (QueueTranslator):
 * the request body of our job, where to send it, and how to read its answers. The loop:
 *
 * - polls start after `firstPollMs` and back off (×1.5, at most MAX_POLL_MS), never beyond the
 *   attempt's deadline: the attempt's AbortSignal ends the loop;
 * - a poll that fails in passing (no answer, a broken one, a 5xx, a 429) is polled again with
 *   the same backoff (a 429 after its Retry-After), at most MAX_POLL_RETRIES times in a row and
 *   never past the deadline: the job goes on at the provider, which bills it, and giving up
 *   would submit a second one on the next account (fal's own client retries its status polls
 *   the same way). A result document is fetched again on the statuses fal's client retries
 *   (no 500 there: that is the job's own failure, stored);
 * - whenever an attempt ends while the provider still holds the job (abort, timeout, polls
 *   that kept failing, an answer we cannot read), the provider's cancel is called (fal,
 *   Replicate; BFL has none), once, in the background, with a short time limit of its own;
 * - a failed or canceled job is a failed attempt (the pool retries elsewhere), a moderated one
 *   a refusal (400, no retry), whether the status says so (BFL) or the result fetch answers a
 *   status the translator names (fal's 422); 429/401/403 and bad statuses fail as every
 *   upstream call does;
 * - status and result URLs get our credentials only when they are on the upstream's own site:
 *   its base_url host, or a host under the domain the translator names (BFL's regional polling
 *   hosts under bfl.ai) when base_url is under it too;
 *   the image URL is downloaded without credentials, bounded, and never reaches our client.
 */
import type { UpstreamConfig } from "../../config";
import type { GeneratedImage, ImageEngine, ImageJob, InputProblem } from "../../core/engine";
import { UpstreamRejected } from "../../core/engine";
import type { Clock } from "../../core/clock";
import { AttemptFailure, type AccountPool, type AttemptContext } from "../pool";
import { SecretRedactor } from "../redact";
import { callJson, checkUpstreamImage, downloadWithinAttempt, joinUrl, type UpstreamCall } from "../upstreamHttp";
import { queueAuthHeaders, type KeyScheme } from "./auth";
import { pauseUnlessAborted } from "../../core/deadline";
import { listenForAbort } from "../../core/cancelScope";

/** First status poll after submitting (the pool's registration lets tests shorten it). */
export const FIRST_POLL_MS = 500;
export const MAX_POLL_MS = 5_000;
/** Failed polls in a row that are polled again (fal's client: 5 for a status, 3 for a result). */
export const MAX_POLL_RETRIES = 5;
const POLL_BACKOFF = 1.5;
/** Statuses of a status poll that are polled again (429 and every 5xx; a job's status is only read). */
const isRetriedStatusPoll = (status: number) => status === 429 || status >= 500;
/** Statuses of a result fetch that are fetched again: not a 500, the job's own stored failure. */
const isRetriedResultFetch = (status: number) => status === 429 || status === 502 || status === 503 || status === 504;
/** A cancel call gets this long; it runs after the attempt has already ended. */
const CANCEL_TIMEOUT_MS = 5_000;
/** How long past the attempt's deadline a held-open submit may still answer (submitHeldOpen). */
const HELD_SUBMIT_MARGIN_MS = 10_000;
/** Statuses of a submit that refuse the job itself (a bad input), on every queue API. */
export const REJECT_STATUSES = [400, 413, 415, 422];

/** What a provider holds for us after the submit. */
export interface QueueHandle {
  id: string;
  /** GET for the status (fal status_url, Replicate urls.get, BFL polling_url). */
  statusUrl: string;
  /** Where the result document will be (fal response_url). */
  resultUrl?: string;
  /** How to cancel the job, where the API allows it. */
  cancel?: { method: "PUT" | "POST"; url: string };
}

/** Where a job stands after one look at it. */
export type QueueOutcome =
  | { state: "pending" }
  /** Done; the result document is at this URL (fal response_url): GET it and read it with readResult. */
  | { state: "result"; url: string }
  /** Done; the image is at this URL (downloaded without credentials), or in it (a data: URL). */
  | { state: "image"; url: string }
  | { state: "failed"; message: string }
  /** The provider refused the content (moderation): another account would too. */
  | { state: "refused"; message: string };

export interface SubmitRequest {
  /** Path under base_url. */
  path: string;
  body: Record<string, unknown>;
}

/** One provider's side of the queue loop: pure functions of our job and its answers. */
export interface QueueTranslator {
  readonly keyScheme: KeyScheme;
  /**
   * The provider's own domain, when it answers status URLs on other hosts under it (BFL's
   * regional polling hosts): they get our credentials too. Without it, only base_url's host.
   */
  readonly siblingDomain?: string;
  /** Inputs the provider cannot take, known before the charge. */
  inputProblem(job: Omit<ImageJob, "signal">, kind: "generate" | "edit"): InputProblem | null;
  /** The submit: path and JSON body (async: a mask may need converting). */
  submitRequest(job: ImageJob): Promise<SubmitRequest>;
  /**
   * Extra headers of the submit, given the time left in the attempt (Replicate's Prefer: wait):
   * a translator that has them asks the provider to hold the submit open while the job runs
   * (see submitHeldOpen).
   */
  submitHeaders?(remainingMs: number): Record<string, string>;
  /** The submit's answer: the job's handle and, when the provider already says, its outcome. */
  readSubmitted(answer: unknown): { handle: QueueHandle; outcome: QueueOutcome };
  readStatus(answer: unknown, handle: QueueHandle): QueueOutcome;
  /** The result document of a `result` outcome. */
  readResult?(answer: unknown): QueueOutcome;
  /**
   * Statuses of the result fetch that refuse the job itself (fal's model errors: a content
   * policy violation or an input it cannot take, 422): no retry, no failure of the account.
   */
  readonly resultRejectStatuses?: readonly number[];
}

export class QueueEngine implements ImageEngine {
  private readonly redactor: SecretRedactor;
  private readonly accounts: Map<string, Record<string, string>>;

  constructor(
    private readonly upstream: UpstreamConfig,
    private readonly pool: AccountPool,
    private readonly clock: Clock,
    private readonly translator: QueueTranslator,
    redactor?: SecretRedactor,
    private readonly firstPollMs = FIRST_POLL_MS,
  ) {
    this.redactor = redactor ?? SecretRedactor.forAccounts(upstream.accounts);
    this.accounts = new Map(upstream.accounts.map((a) => [a.id, queueAuthHeaders(translator.keyScheme, a)]));
  }

  inputProblem(job: Omit<ImageJob, "signal">, kind: "generate" | "edit"): InputProblem | null {
    return this.translator.inputProblem(job, kind);
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job, "generate");
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    return this.run(job, "edit");
  }

  private async run(job: ImageJob, kind: "generate" | "edit"): Promise<GeneratedImage> {
    const problem = this.translator.inputProblem(job, kind);
    if (problem) throw new UpstreamRejected(problem.message);
    let request: SubmitRequest;
    try {
      request = await this.translator.submitRequest(job);
    } catch (e) {
      // Only the mask is decoded here; the images flow checked it, so this is a refusal.
      throw new UpstreamRejected(`the mask could not be converted: ${e instanceof Error ? e.message : String(e)}`);
    }
    const json = JSON.stringify(request.body);
    const { value, trace } = await this.pool.run((ctx) => this.attempt(ctx, request.path, json, job.prompt), job.signal);
    return { ...value, trace };
  }

  private async attempt(ctx: AttemptContext, path: string, json: string, prompt: string): Promise<GeneratedImage> {
    const auth = this.accounts.get(ctx.account.id) ?? {};
    const extra = this.translator.submitHeaders?.(ctx.deadline - this.clock());
    const submit = this.call(ctx, joinUrl(this.upstream.base_url, path), { ...auth, ...extra, "content-type": "application/json", accept: "application/json" }, json, REJECT_STATUSES);
    const submitted = this.translator.readSubmitted(await (extra ? this.submitHeldOpen(ctx, submit, auth) : callJson(submit)));
    const { handle } = submitted;
    let outcome = submitted.outcome;
    let held = true; // the provider still holds a job we may cancel
    try {
      const wait = { ms: this.firstPollMs };
      while (outcome.state === "pending") {
        await this.pause(ctx, wait);
        outcome = this.translator.readStatus(await this.getRetrying(ctx, handle.statusUrl, auth, wait, isRetriedStatusPoll), handle);
      }
      held = false;
      if (outcome.state === "result") {
        if (!this.translator.readResult) throw new AttemptFailure("failed", "the upstream answered a result document this kind cannot read");
        outcome = this.translator.readResult(await this.getRetrying(ctx, outcome.url, auth, { ms: this.firstPollMs }, isRetriedResultFetch, this.translator.resultRejectStatuses));
      }
      switch (outcome.state) {
        case "image":
          return checkUpstreamImage(await this.download(ctx, outcome.url), prompt);
        case "refused":
          throw new AttemptFailure("rejected", this.redactor.message(outcome.message, 500));
        case "failed":
          throw new AttemptFailure("failed", `the upstream job failed: ${this.redactor.message(outcome.message, 500)}`);
        default:
          throw new AttemptFailure("failed", `the upstream job ended as ${outcome.state}`);
      }
    } finally {
      // Whatever ended the attempt, a job left running would be billed for nothing.
      if (held && handle.cancel) this.cancel(handle.cancel, auth);
    }
  }

  /**
   * A submit the provider holds open while the job runs (Replicate's `Prefer: wait`): the job's
   * id comes only with the answer, so an attempt that ended meanwhile (abort, deadline) and cut
   * the submit off could never cancel it, and the provider would run it to the end, billed.
   * So the submit is not cut off with the attempt: the attempt ends at once, the submit goes on
   * in the background (bounded: the provider answers within the wait it was asked for, which
   * ends before the attempt's deadline), and a job its answer shows still running is canceled.
   */
  private async submitHeldOpen(ctx: AttemptContext, call: UpstreamCall, auth: Record<string, string>): Promise<unknown> {
    const answer = callJson({ ...call, signal: AbortSignal.timeout(Math.max(0, ctx.deadline - this.clock()) + HELD_SUBMIT_MARGIN_MS) });
    try {
      return await untilAborted(answer, ctx.signal);
    } catch (e) {
      if (ctx.signal.aborted) {
        answer
          .then((json) => {
            const { handle, outcome } = this.translator.readSubmitted(json);
            if (outcome.state === "pending" && handle.cancel) this.cancel(handle.cancel, auth);
          })
          .catch(() => {}); // no answer, or one we cannot read: nothing names a job to cancel
      }
      throw e;
    }
  }

  /** Waits `wait.ms` (never past the deadline; an abort ends it early and throws), then backs off. */
  private async pause(ctx: AttemptContext, wait: { ms: number }, atLeastMs = 0): Promise<void> {
    await pauseUnlessAborted(Math.min(Math.max(wait.ms, atLeastMs), Math.max(0, ctx.deadline - this.clock())), ctx.signal);
    ctx.signal.throwIfAborted();
    wait.ms = Math.min(MAX_POLL_MS, Math.ceil(wait.ms * POLL_BACKOFF));
  }

  /**
   * GET a status or result document, again after a failure in passing (no answer, a broken one,
   * or a status `retried` picks), at most MAX_POLL_RETRIES times in a row with the poll backoff,
   * after a 429's Retry-After, and only while the deadline allows; then the failure stands.
   */
  private async getRetrying(ctx: AttemptContext, url: string, auth: Record<string, string>, wait: { ms: number }, retried: (status: number) => boolean, rejectStatuses: readonly number[] = []): Promise<unknown> {
    // Our credentials go only to the upstream's own site.
    if (!onUpstreamSite(url, this.upstream.base_url, this.translator.siblingDomain)) throw new AttemptFailure("failed", "the upstream answered a status URL outside its own site");
    const call = this.call(ctx, url, { ...auth, accept: "application/json" }, undefined, [...rejectStatuses], "GET");
    for (let failures = 0; ; failures++) {
      try {
        return await callJson(call);
      } catch (e) {
        if (ctx.signal.aborted || failures >= MAX_POLL_RETRIES || !passing(e, retried)) throw e;
        const after = e.retryAfterMs ?? 0;
        if (this.clock() + after >= ctx.deadline) throw e;
        await this.pause(ctx, wait, after);
      }
    }
  }

  private call(ctx: AttemptContext, url: string, headers: Record<string, string>, body: string | undefined, rejectStatuses: number[], method: "GET" | "POST" = "POST"): UpstreamCall {
    return { url, method, headers, ...(body === undefined ? {} : { body }), signal: ctx.signal, redactor: this.redactor, now: this.clock, rejectStatuses };
  }

  private download(ctx: AttemptContext, url: string): Promise<Uint8Array> {
    return downloadWithinAttempt(this.upstream, ctx, url, this.redactor, this.clock);
  }

  /** Asks the provider to drop a job we no longer wait for; best effort, in the background. */
  private cancel(cancel: NonNullable<QueueHandle["cancel"]>, auth: Record<string, string>): void {
    if (!onUpstreamSite(cancel.url, this.upstream.base_url, this.translator.siblingDomain)) return;
    void fetch(cancel.url, { method: cancel.method, headers: { ...auth, accept: "application/json" }, signal: AbortSignal.timeout(CANCEL_TIMEOUT_MS) })
      .then((res) => res.body?.cancel())
      .catch(() => {});
  }
}

/**
 * A failure of a read that says nothing about the job: no answer or a broken one (a failed
 * attempt without an HTTP status), or a status `retried` picks. An answer that is not JSON,
 * or a refusal of our credentials, is not polled again.
 */
function passing(e: unknown, retried: (status: number) => boolean): e is AttemptFailure {
  if (!(e instanceof AttemptFailure)) return false;
  if (e.status !== undefined) return retried(e.status);
  return e.kind === "failed";
}

/**
 * True when `url` may carry our credentials: the same protocol as base_url and its host; or,
 * when the provider names its `siblingDomain`, any host under it if base_url's is under it too
 * (BFL polls on regional hosts such as api.eu1.bfl.ai). No domain is guessed from base_url: its
 * last two labels would make every tenant of a shared suffix (herokuapp.com, co.uk) one site.
 */
export function onUpstreamSite(url: string, baseUrl: string, siblingDomain?: string): boolean {
  let u: URL;
  let base: URL;
  try {
    u = new URL(url);
    base = new URL(baseUrl);
  } catch {
    return false;
  }
  if (u.protocol !== base.protocol) return false;
  if (u.host === base.host) return true;
  if (!siblingDomain) return false;
  const under = (host: string) => host === siblingDomain || host.endsWith(`.${siblingDomain}`);
  return under(base.hostname) && under(u.hostname);
}


/** The shared reading of a queue answer: a plain object or a failed attempt. */
export function objectAnswer(answer: unknown, what: string): Record<string, unknown> {
  if (answer === null || typeof answer !== "object" || Array.isArray(answer)) throw new AttemptFailure("failed", `the upstream's ${what} is not a JSON object`);
  return answer as Record<string, unknown>;
}

/** A required string field of an answer, else a failed attempt. */
export function stringField(o: Record<string, unknown>, key: string, what: string): string {
  const v = o[key];
  if (typeof v !== "string" || v.length === 0) throw new AttemptFailure("failed", `the upstream's ${what} has no ${key}`);
  return v;
}

/** `work`'s outcome, or a rejection with the signal's reason as soon as it aborts (work itself goes on). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const stop = listenForAbort(signal, reject);
    work.then(
      (value) => (stop(), resolve(value)),
      (e: unknown) => (stop(), reject(e)),
    );
  });
}
