/**
 * Task webhooks: when an image task ends (succeeded, failed, canceled) its owner's endpoint, and
 * the request's own webhook_url if it gave one, receive the event, signed by the Standard
 * Webhooks scheme with the user's secret.
 *
 * Delivery is at least once:
 * - taskFinished records one delivery per URL in the database and returns; it never waits for
 *   the network and never throws (the task has ended whatever happens here);
 * - a worker (start/stop with the server) claims due deliveries, at most `concurrency` at once
 *   and at most perUserSlots of them for one user, round robin across users (webhooksFairness),
 *   each for a lease longer than an attempt can take: an attempt a crash cut short is made
 *   again once its lease ends, on the next start;
 * - each attempt resolves the URL, checks the addresses and connects to the one checked
 *   (webhooksTarget), signs with a fresh timestamp (with the current secret, and with the
 *   previous one during a rotation's overlap: webhooksEndpoints), and is recorded with its
 *   status or error;
 *   failures are retried by webhooksSchedule for about a day.
 * A receiver may therefore see an event more than once: webhook-id is the same every time.
 *
 * The body is `{"type", "timestamp", "data"}` (the spec's recommended shape) with the task
 * object as data, minus the images' base64 (megabytes the receiver fetches from the task
 * instead; the spec asks for small payloads).
 */
import type { Logger } from "../logger";
import type { Clock } from "./clock";
import { sha256Hex } from "./digest";
import { newId } from "./ids";
import { DatabaseBusyError, type FlowStore } from "./store";
import type { ImageTaskObject, TaskEvent, TaskEventSink } from "./tasks";
import { postWebhook, type AttemptAnswer } from "./webhooksDelivery";
import { WebhookEndpoints } from "./webhooksEndpoints";
import { nextAttemptAt, totalAttempts } from "./webhooksSchedule";
import type { SecretBox } from "./webhooksSecretBox";
import { webhookHeaders, type SigningSecrets } from "./webhooksSignature";
import type { AttemptOutcome, NewDelivery, WebhookDeliveryRow, WebhookRecords } from "./webhooksStore";
import { systemResolver, type ResolveHost } from "./pinnedFetch";
import { attemptErrorText, NO_SECRET, SECRET_UNREADABLE } from "./webhooksAttemptError";
import { checkWebhookTarget, webhookUrlSyntax, type WebhookUrlPolicy } from "./webhooksTarget";
import { InflightByUser, MAX_PENDING_TESTS, perUserSlots } from "./webhooksFairness";
import { WebhookKeyCheck, WebhookKeyMismatch } from "./webhooksKeyCheck";

/** An attempt this server cannot make because its key is not the database's (not recorded). */
const KEY_NOT_OURS = Symbol("key not ours");
/** How often a server paused for a foreign key looks whether it fits again. */
const KEY_RECHECK_MS = 60_000;

/** Why a test event was not sent: no endpoint, or MAX_PENDING_TESTS still waiting. */
export type TestEventRefusal = "no_endpoint" | "too_many_pending";

export interface WebhookSettings {
  allowPrivateAddresses: boolean;
  /** Delay after each failed attempt (webhooksSchedule). */
  retryDelaysMs: readonly number[];
  attemptTimeoutMs: number;
  /** Attempts in flight at once. */
  concurrency: number;
  /** Longest time between two looks for due deliveries. */
  pollIntervalMs: number;
  /** How long a rotated-out secret still signs beside the new one; 0: not at all. */
  rotationOverlapMs: number;
}

export interface WebhookDeps {
  records: WebhookRecords;
  box: SecretBox;
  /** Whether the box's key exists yet (the key file is made on first use); always, by default. */
  keyExists?: () => boolean;
  whenWritable: FlowStore["whenWritable"];
  clock: Clock;
  logger: Logger;
  settings: WebhookSettings;
  resolve?: ResolveHost;
  random?: () => number;
}

export const TEST_EVENT_TYPE = "webhook.test";

/** Finished deliveries (and their attempts) are kept this long for the workbench, then deleted. */
export const DELIVERY_RETENTION_MS = 30 * 24 * 3_600_000;
const PRUNE_EVERY_MS = 3_600_000;

/** Shortest pause between two looks that started nothing (a locked database must not spin the loop). */
const MIN_LOOK_MS = 20;
/** Extra lease beyond the attempt's own time limit (name resolution, recording). */
const LEASE_MARGIN_MS = 30_000;
/** How long recording an attempt may wait for another process's write lock; past it the lease ends and the attempt is repeated. */
const RECORD_WAIT_MS = 60_000;

/** One event per task and outcome: a repeated taskFinished for the same task and type records nothing new. */
export function taskEventId(type: string, taskId: string): string {
  return `msg_${sha256Hex(`${type}:${taskId}`).slice(0, 32)}`;
}

/** The task object without image bytes (b64_json); everything else as the API shows it. */
export function webhookTask(task: ImageTaskObject): Record<string, unknown> {
  const plain = task as unknown as Record<string, unknown>;
  const result = plain.result as Record<string, unknown> | undefined;
  if (!result || !Array.isArray(result.data)) return plain;
  const data = (result.data as unknown[]).map((item) => {
    if (!item || typeof item !== "object") return item;
    const { b64_json: _omitted, ...rest } = item as Record<string, unknown>;
    return rest;
  });
  return { ...plain, result: { ...result, data } };
}

export function eventBody(type: string, at: number, data: unknown): string {
  return JSON.stringify({ type, timestamp: new Date(at).toISOString(), data });
}

export class WebhookDispatcher implements TaskEventSink {
  readonly endpoints: WebhookEndpoints;
  /** Whether this server's key is the one the stored secrets were sealed with (webhooksKeyCheck). */
  readonly keyCheck: WebhookKeyCheck;
  private readonly policy: WebhookUrlPolicy;
  private readonly inflight = new Set<Promise<void>>();
  private readonly inflightByUser = new InflightByUser();
  /** Events being written (the endpoint read, then the insert); idle() and stop() wait for them too. */
  private readonly recording = new Set<Promise<void>>();
  private running = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastPrune = 0;
  /**
   * When this server found its key is not the one the stored secrets were sealed with (another
   * instance sealed first, or the secrets were forgotten and sealed again under another key
   * while it ran): it then takes no deliveries, which an instance with the database's key
   * makes, and looks again at most every KEY_RECHECK_MS. Null while the key fits.
   */
  private foreignKeyAt: number | null = null;

  constructor(private readonly deps: WebhookDeps) {
    this.policy = { allowPrivateAddresses: deps.settings.allowPrivateAddresses, resolve: deps.resolve ?? systemResolver };
    this.keyCheck = new WebhookKeyCheck(deps.records, deps.box, deps.clock, deps.keyExists);
    this.endpoints = new WebhookEndpoints(deps.records, deps.box, this.policy, deps.clock, deps.settings.rotationOverlapMs, this.keyCheck);
  }

  // ---- recording events ------------------------------------------------------------------

  /**
   * Records the event's deliveries (the task has finished either way): never rejects, errors are
   * logged. The task runner does not wait for it; stop() and idle() do.
   */
  taskFinished(event: TaskEvent): Promise<void> {
    const work: Promise<void> = this.recordTaskEvent(event)
      .catch((e) => this.deps.logger.error("task webhook not recorded", { task_id: event.task?.id ?? null, error: String(e) }))
      .finally(() => this.recording.delete(work));
    this.recording.add(work);
    return work;
  }

  private async recordTaskEvent(event: TaskEvent): Promise<void> {
    const now = this.deps.clock();
    const body = eventBody(event.type, now, webhookTask(event.task));
    const base = { eventId: taskEventId(event.type, event.task.id), userId: event.userId, eventType: event.type, payload: body };
    const deliveries: NewDelivery[] = [];
    const endpointUrl = (await this.deps.records.endpoint(event.userId))?.url ?? null;
    if (endpointUrl !== null) deliveries.push({ ...base, source: "endpoint", url: endpointUrl });
    if (event.webhookUrl !== undefined && event.webhookUrl !== endpointUrl) {
      const syntax = webhookUrlSyntax(event.webhookUrl);
      if (syntax.url) deliveries.push({ ...base, source: "request", url: syntax.url.href });
      else this.deps.logger.warn("task webhook_url not usable", { task_id: event.task.id, problem: syntax.problem });
    }
    if (deliveries.length > 0) await this.record(deliveries, now);
  }

  /**
   * A `webhook.test` event to the user's endpoint, recorded; why not when it is refused. Test
   * events are free and each is retried for a day, so only a few may wait at once (two
   * requests at once may both pass the count: the bound is loose by that much, never unbounded).
   */
  async sendTestEvent(userId: number): Promise<TestEventRefusal | null> {
    const url = (await this.deps.records.endpoint(userId))?.url ?? null;
    if (url === null) return "no_endpoint";
    if ((await this.deps.records.pendingTests(userId)) >= MAX_PENDING_TESTS) return "too_many_pending";
    const now = this.deps.clock();
    const payload = eventBody(TEST_EVENT_TYPE, now, { message: "A test event from the Atelier workbench." });
    await this.record([{ eventId: newId("msg_"), userId, eventType: TEST_EVENT_TYPE, source: "test", url, payload }], now);
    return null;
  }

  private async record(deliveries: NewDelivery[], now: number): Promise<void> {
    // Only a locked database makes it wait (and retry).
    await this.deps.whenWritable(() => this.deps.records.enqueue(deliveries, now), { maxWaitMs: Infinity });
    this.wake();
  }

  /**
   * For a request's own `webhook_url`, before it is charged: why it cannot be used (a sentence
   * for the client), or null. The user needs a signing secret (nothing is sent unsigned), and
   * the URL must pass the URL rule now; it is checked again at every attempt.
   */
  async checkWebhookUrl(url: string, userId: number): Promise<string | null> {
    const syntax = webhookUrlSyntax(url);
    if (!syntax.url) return syntax.problem;
    if (!(await this.endpoints.hasSecret(userId))) return "A webhook_url needs a signing secret to sign with: create one on the workbench's Webhooks page first.";
    const check = await checkWebhookTarget(url, this.policy);
    return check.refused ?? null;
  }

  // ---- the delivery worker ---------------------------------------------------------------

  /** Starts delivering (due deliveries from before a restart first). Calling it again does nothing. */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule(0);
  }

  /** Stops taking deliveries and waits for the attempts in flight (each ends within its time limit). */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.idle();
  }

  /** Looks for due deliveries now (after an event is recorded). */
  private wake(): void {
    if (this.running) this.schedule(0);
  }

  private schedule(delayMs: number): void {
    if (!this.running) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.tick(), Math.max(0, delayMs));
  }

  private tick(): void {
    this.timer = undefined;
    if (!this.running) return;
    void this.claimAndDeliver().then(async (started) => {
      const { concurrency, pollIntervalMs } = this.deps.settings;
      // Full: a finished attempt wakes the worker. Some started: look again at once for more.
      if (this.inflight.size >= concurrency) this.schedule(pollIntervalMs);
      else this.schedule(started > 0 ? 0 : await this.untilNextLook());
    });
  }

  /**
   * After a look that claimed nothing: until the earliest pending delivery is due, within
   * [MIN_LOOK_MS, pollIntervalMs]; the poll interval when one is due already (every slot its user
   * may take is held, a lock elsewhere, or this server's key is not the database's): a freed slot
   * wakes the worker, and looking every MIN_LOOK_MS meanwhile only repeats the claim's reads.
   */
  private async untilNextLook(): Promise<number> {
    const { pollIntervalMs } = this.deps.settings;
    try {
      const due = await this.deps.records.nextDue();
      if (due === null) return pollIntervalMs;
      const wait = due - this.deps.clock();
      if (wait <= 0) return pollIntervalMs;
      return Math.min(pollIntervalMs, Math.max(MIN_LOOK_MS, wait));
    } catch {
      return pollIntervalMs;
    }
  }

  /**
   * Claims what is due, up to the free capacity, and starts those attempts; returns how many
   * started. Tests call it directly (with the worker stopped) and await `idle()`.
   */
  async claimAndDeliver(): Promise<number> {
    const { settings, records, clock, logger } = this.deps;
    const free = settings.concurrency - this.inflight.size;
    if (free <= 0) return 0;
    if (this.foreignKeyAt !== null && !(await this.keyFitsAgain())) return 0;
    const now = clock();
    await this.pruneNow(now);
    let claimed: WebhookDeliveryRow[];
    try {
      // No waiting for another process's lock here: the next look comes soon anyway.
      claimed = await this.deps.whenWritable(
        () => records.claimDue(now, free, now + settings.attemptTimeoutMs + LEASE_MARGIN_MS, perUserSlots(settings.concurrency), this.inflightByUser.held),
        { maxWaitMs: 0 },
      );
    } catch (e) {
      if (!(e instanceof DatabaseBusyError)) logger.error("webhook deliveries not claimed", { error: String(e) });
      return 0;
    }
    for (const row of claimed) {
      this.inflightByUser.add(row.user_id);
      const work = this.deliver(row).finally(() => {
        this.inflight.delete(work);
        this.inflightByUser.remove(row.user_id);
        this.wake();
      });
      this.inflight.add(work);
    }
    return claimed.length;
  }

  /** Resolves when no event is being recorded and no attempt is in flight. */
  async idle(): Promise<void> {
    while (this.inflight.size > 0 || this.recording.size > 0) await Promise.allSettled([...this.recording, ...this.inflight]);
  }

  /**
   * Hourly: deletes old finished deliveries, and the previous secrets whose overlap has ended
   * (an attempt drops its user's too, but a user with no more deliveries would keep one).
   */
  private async pruneNow(now: number): Promise<void> {
    if (now - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = now;
    try {
      await this.deps.records.pruneFinished(now - DELIVERY_RETENTION_MS);
      await this.deps.records.dropExpiredPreviousSecrets(now);
    } catch {
      // Housekeeping only: a locked database tries again in an hour.
    }
  }

  private async deliver(row: WebhookDeliveryRow): Promise<void> {
    const { clock, settings, logger } = this.deps;
    const at = clock();
    const started = performance.now();
    const answer = await this.attempt(row);
    // Not this server's to make (its key is not the database's): left unrecorded, the claim's
    // lease runs out and an instance with the right key makes the attempt.
    if (answer === KEY_NOT_OURS) return;
    const durationMs = performance.now() - started;
    const made = row.attempts + 1;
    let outcome: AttemptOutcome;
    if (answer.ok) outcome = { state: "delivered" };
    else if (answer.gone) outcome = { state: "failed", reason: `${answer.error} (410 Gone: no further attempts)` };
    else {
      const next = nextAttemptAt(clock(), made, settings.retryDelaysMs, this.deps.random);
      outcome = next === null ? { state: "failed", reason: `${answer.error} (gave up after ${totalAttempts(settings.retryDelaysMs)} attempts)` } : { state: "pending", nextAttemptAt: next };
    }
    try {
      await this.deps.whenWritable(() => this.deps.records.recordAttempt(row.id, { at, status: answer.status, error: answer.error, durationMs }, outcome), {
        maxWaitMs: RECORD_WAIT_MS,
      });
    } catch (e) {
      // Not recorded: the lease runs out and the attempt is made again (at least once).
      logger.error("webhook attempt not recorded", { delivery_id: row.id, event_id: row.event_id, error: String(e) });
      return;
    }
    if (outcome.state === "failed") logger.warn("webhook delivery failed", { delivery_id: row.id, event_id: row.event_id, user_id: row.user_id, attempts: made });
  }

  /** True (and deliveries paused, an error logged) when the key check finds this server's key is not the database's. */
  private async keyIsForeign(): Promise<boolean> {
    try {
      await this.keyCheck.verify();
      return false;
    } catch (e) {
      if (!(e instanceof WebhookKeyMismatch)) return false;
      if (this.foreignKeyAt === null) this.deps.logger.error("webhook deliveries paused on this server", { error: e.message });
      this.foreignKeyAt = this.deps.clock();
      return true;
    }
  }

  /** Whether a paused server's key fits again (the check is made at most every KEY_RECHECK_MS). */
  private async keyFitsAgain(): Promise<boolean> {
    if (this.deps.clock() - this.foreignKeyAt! < KEY_RECHECK_MS) return false;
    if (await this.keyIsForeign()) return false;
    this.foreignKeyAt = null;
    this.deps.logger.info("webhook deliveries resumed on this server: its key is the database's again");
    return true;
  }

  /** One attempt; never throws. */
  private async attempt(row: WebhookDeliveryRow): Promise<AttemptAnswer | typeof KEY_NOT_OURS> {
    const failed = (error: string): AttemptAnswer => ({ ok: false, status: null, error, gone: false });
    let secrets: SigningSecrets | null;
    try {
      secrets = await this.endpoints.secretsOf(row.user_id);
    } catch {
      // This one secret (a row tampered with), or every secret (this server's key is not the database's)?
      return (await this.keyIsForeign()) ? KEY_NOT_OURS : failed(SECRET_UNREADABLE);
    }
    if (secrets === null) return failed(NO_SECRET);
    const check = await checkWebhookTarget(row.url, this.policy);
    if (!check.target) return failed(attemptErrorText.notSent(check.refused));
    const timestamp = Math.floor(this.deps.clock() / 1000);
    return postWebhook(check.target, webhookHeaders(secrets, row.event_id, timestamp, row.payload), row.payload, this.deps.settings.attemptTimeoutMs);
  }
}
