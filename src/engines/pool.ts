/**
 * The account pool of one upstream: which account serves the next request, how long a
 * misbehaving account rests, and when a request gives up.
 *
 * - Choice: among healthy accounts with free capacity, the one with the lowest load
 *   (in_flight / weight); ties (e.g. all idle) go by smooth weighted round robin, so
 *   sequential traffic also spreads by weight.
 * - No free capacity: wait (within the queue deadline, first come first served) for a release.
 * - 429: the account cools down for the delay the engine read (retry-after / retry-after-ms,
 *   Gemini's RetryInfo), else 1 s doubling per consecutive 429 up to a cap; the request
 *   retries on another account.
 * - 5xx, resets, timeouts, malformed answers: retry elsewhere (max_attempts in all, within the
 *   overall deadline); `failure_threshold` consecutive failures cool the account down
 *   exponentially, after which a single probe request decides whether it is healthy again.
 * - 401/403: the account is disabled in the store until an admin enables it; the flags are
 *   re-read when another process wrote to the store (checked at most every 100 ms), so the
 *   CLI in another process takes effect without a query on every pick.
 * - 400-class refusals: no retry, no effect on the account.
 *
 * - Every failure text the pool keeps, logs, stores or throws has been through the redactor
 *   (engines redact what they build too; this also covers errors an attempt did not expect,
 *   and disabled reasons an older version stored).
 *
 * - In-flight counts, rests, failure counts and probes live in a PoolState: this process's
 *   memory by default, Redis with [redis] url (engines/redisPoolState.ts), so several instances
 *   share them; the policy above stays here. A shared state that does not answer ends the
 *   request with UpstreamUnavailable (503, refunded), never a hang.
 *
 * No HTTP and no SQLite here: attempts are callbacks, persistence is a small interface.
 */
import { SecretRedactor } from "./redact";
import type { UpstreamTrace } from "../core/engine";
import type { AccountFailure, AccountHealth, AccountSnapshot, AttemptFailureKind, DisabledInfo, PoolStateStore } from "../core/store";
import { EngineTimeout, UpstreamFailed, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable, type EngineError } from "../core/engine";
import type { Clock } from "../core/clock";
import { CancelScope, type CancelView } from "../core/cancelScope";
import { runAfter } from "../core/timerQueue";
import { LocalPoolState, type AccountLease, type PoolState, type SharedAccountState } from "./poolState";


export interface PoolAccountConfig {
  id: string;
  weight: number;
  maxConcurrency: number;
}

/** An account picked for an attempt, and its share of the account's capacity. */
interface TakenAccount {
  account: AccountRuntime;
  lease: AccountLease;
}

/** What the request's last attempt failed with, and on which account. */
interface LastFailure {
  account: string;
  failure: AttemptFailure;
}

export interface PoolSettings {
  /** One attempt's time limit. */
  attemptTimeoutMs: number;
  /** Attempts per request, across accounts. */
  maxAttempts: number;
  /** The whole request's limit (waiting + every attempt). */
  deadlineMs: number;
  /** Longest wait for an account with free capacity. */
  queueTimeoutMs: number;
  /** 429 without a retry hint: 1 s, doubling per consecutive 429, capped here. */
  rateLimitCooldownMaxMs: number;
  /** Consecutive failures that cool an account down. */
  failureThreshold: number;
  /** First failure cooldown; doubles per further failure, capped. */
  failureCooldownMs: number;
  failureCooldownMaxMs: number;
}

export type { AccountFailure, AccountHealth, AccountSnapshot, DisabledInfo, PoolStateStore } from "../core/store";

export interface PoolLogger {
  warn(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
}

export type { AttemptFailureKind } from "../core/store";

/**
 * How one attempt against one account went wrong; engines throw it from their attempt
 * callback. `message` should already be free of secrets (the pool redacts it again).
 */
export class AttemptFailure extends Error {
  override name = "AttemptFailure";
  constructor(
    readonly kind: AttemptFailureKind,
    message: string,
    readonly retryAfterMs?: number,
    readonly status?: number,
    /** No other attempt may follow (a streamed answer already passed part of its reply on). */
    readonly final = false,
  ) {
    super(message);
  }
}

export interface AttemptContext {
  account: PoolAccountConfig;
  /** Aborts at the attempt timeout, the overall deadline or when the request is cancelled. */
  signal: AbortSignal;
  /** The same cancellation without an AbortSignal (made only when `signal` is read): for a client that only needs to hear it. */
  cancel: CancelView;
  /** Absolute time (clock) when this attempt must be finished. */
  deadline: number;
}

/**
 * An attempt's context whose `signal` is made only when read. A class rather than an object
 * literal with a getter: JavaScriptCore defines a literal's getter anew on every evaluation
 * (about 75 ns against 6–14 for a class's, in a loop alone), and every request makes one.
 */
class ScopedAttempt implements AttemptContext {
  constructor(
    readonly account: PoolAccountConfig,
    readonly cancel: CancelScope,
    readonly deadline: number,
  ) {}

  get signal(): AbortSignal {
    return this.cancel.signal;
  }
}

export interface PoolResult<T> {
  value: T;
  trace: UpstreamTrace;
}

const poolResult = <T>(value: T, trace: UpstreamTrace): PoolResult<T> => ({ value, trace });
const tracedValue = <T extends { trace?: UpstreamTrace }>(value: T, trace: UpstreamTrace): T => ((value.trace = trace), value);

const RECENT_FAILURES = 5;
/** Longest failure text kept per account, logged, or stored as a disabled reason. */
const FAILURE_MESSAGE_CHARS = 300;
const RATE_LIMIT_BASE_MS = 1000;
/**
 * The longest rest an upstream's own retry-after can ask for: past a day it is a mistake or an
 * attack (`Retry-After: 99999999999999999999`), and an account must come back without a restart.
 */
export const MAX_RETRY_AFTER_MS = 86_400_000;
const SNAPSHOT_THROTTLE_MS = 500;
/** Longest an account enabled by another process (`atelier upstreams enable`) stays unused. */
const FLAGS_CHECK_MS = 100;

/** What this process keeps about an account (the counts that instances share are in the PoolState). */
interface AccountRuntime {
  cfg: PoolAccountConfig;
  recentFailures: AccountFailure[];
  disabled: DisabledInfo | null;
  /** Smooth weighted round robin counter, for ties. */
  wrr: number;
  /** Attempts started on this account, and failed ones by kind, since the process started (for metrics). */
  attempts: number;
  failures: Map<AttemptFailureKind, number>;
}

/** One account's attempt counters since the process started. */
export interface AccountAttemptCounts {
  upstreamId: string;
  accountId: string;
  attempts: number;
  failures: Map<AttemptFailureKind, number>;
}

export class AccountPool {
  private readonly accounts: AccountRuntime[];
  private readonly waiters = new Set<() => void>();
  /** Requests waiting for capacity, in arrival order (tickets). */
  private readonly queue: object[] = [];
  private snapshotTimer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  /** The store's external revision when the disabled flags were last read, and when it was last checked. */
  private flagsRevision: number | undefined;
  private flagsCheckedAt = -Infinity;
  /**
   * A read of the disabled flags under way (the first one starts in the constructor). Every
   * pick that comes meanwhile awaits the same read, so they resume in arrival order and a
   * newcomer cannot take capacity ahead of a request that was re-reading the flags.
   */
  private flagsReading: Promise<void> | null = null;

  constructor(
    readonly upstreamId: string,
    accounts: PoolAccountConfig[],
    private readonly settings: PoolSettings,
    private readonly store: PoolStateStore,
    private readonly clock: Clock,
    private readonly logger?: PoolLogger,
    private readonly redactor: SecretRedactor = new SecretRedactor([]),
    private readonly state: PoolState = new LocalPoolState(),
  ) {
    this.accounts = accounts.map((cfg) => ({
      cfg,
      recentFailures: [],
      disabled: null,
      wrr: 0,
      attempts: 0,
      failures: new Map(),
    }));
    void this.readFlags(false);
  }

  /**
   * Runs `attempt` on accounts until one succeeds, the attempts run out or the deadline
   * passes. Throws the typed engine errors (with a trace) otherwise.
   */
  run<T>(attempt: (ctx: AttemptContext) => Promise<T>, cancel?: AbortSignal | CancelScope): Promise<PoolResult<T>> {
    return this.runFinished(attempt, cancel, poolResult);
  }

  /**
   * run() for an attempt whose value is an object of its own (a fresh reply): the trace is set
   * on the value itself, so the caller's answer needs no await and no copy of its own.
   */
  runTraced<T extends { trace?: UpstreamTrace }>(attempt: (ctx: AttemptContext) => Promise<T>, cancel?: AbortSignal | CancelScope): Promise<T> {
    return this.runFinished(attempt, cancel, tracedValue);
  }

  /**
   * The request's cancellation as a scope: each attempt's is its child (no listener, and the
   * request's own AbortSignal is never made). A signal given instead is followed by one
   * listener, released when the attempts end. A scope given is used as it is, with no frame
   * of its own around the attempts: every async frame a request passes through costs it a
   * resumption when the upstream answers.
   */
  private runFinished<T, R>(attempt: (ctx: AttemptContext) => Promise<T>, cancel: AbortSignal | CancelScope | undefined, finish: (value: T, trace: UpstreamTrace) => R): Promise<R> {
    if (cancel instanceof CancelScope) return this.runAttempts(attempt, cancel, finish);
    const request = cancel ? CancelScope.following(cancel) : new CancelScope();
    return this.runAttempts(attempt, request, finish).finally(() => request.release());
  }

  private async runAttempts<T, R>(attempt: (ctx: AttemptContext) => Promise<T>, request: CancelScope, finish: (value: T, trace: UpstreamTrace) => R): Promise<R> {
    const started = this.clock();
    const deadline = started + this.settings.deadlineMs;
    // Accounts tried so far (no Set: a request tries at most max_attempts of them).
    let tried: string[] | null = null;
    let attempts = 0;
    let last: LastFailure | null = null;
    let latencyMs = 0;
    const fail = (e: EngineError, accountId?: string): never => {
      const id = accountId ?? last?.account;
      e.trace = { upstreamId: this.upstreamId, ...(id ? { accountId: id } : {}), attempts, upstreamLatencyMs: Math.round(latencyMs) };
      throw e;
    };

    while (attempts < this.settings.maxAttempts) {
      if (request.aborted) fail(new EngineTimeout("the request was cancelled or ran out of time"));
      // The common case costs no await: nobody waits, the flags are fresh and the state answers at
      // once. Otherwise the request waits its turn (waitForAccount, a frame of its own: the one
      // every request resumes in stays small).
      const taken: TakenAccount | null = this.takeAtOnce(tried) ?? (await this.waitForAccount(request, tried, last, started, deadline, fail));
      if (!taken) break;
      const account: AccountRuntime = taken.account;
      const lease: AccountLease = taken.lease;

      attempts++;
      account.attempts++;
      (tried ??= []).push(account.cfg.id);
      this.changed();
      const attemptStart = this.clock();
      const attemptDeadline = Math.min(deadline, attemptStart + this.settings.attemptTimeoutMs);
      // The attempt's scope aborts with the request's, or at the attempt's own deadline (an entry
      // on the shared timer); its AbortSignal, made when the transport hands it to fetch, is the
      // only one the request makes.
      const attemptScope = request.child();
      let timedOut = false;
      const timer = runAfter(Math.max(1, attemptDeadline - attemptStart), () => {
        timedOut = true;
        attemptScope.abort(new DOMException("The attempt timed out.", "TimeoutError"));
      });
      try {
        const value = await attempt(new ScopedAttempt(account.cfg, attemptScope, attemptDeadline));
        latencyMs = this.clock() - attemptStart;
        if (this.hasFailureCounts(account)) await this.recordSuccess(account);
        return finish(value, { upstreamId: this.upstreamId, accountId: account.cfg.id, attempts, upstreamLatencyMs: Math.round(latencyMs) });
      } catch (e) {
        latencyMs = this.clock() - attemptStart;
        if (request.aborted) fail(new EngineTimeout("the request was cancelled or ran out of time"), account.cfg.id);
        const failure = this.redacted(
          e instanceof AttemptFailure
            ? e
            : timedOut
              ? new AttemptFailure("timeout", `no answer within ${attemptDeadline - attemptStart} ms`)
              : new AttemptFailure("failed", e instanceof Error ? e.message : String(e)),
        );
        last = { account: account.cfg.id, failure };
        account.failures.set(failure.kind, (account.failures.get(failure.kind) ?? 0) + 1);
        await this.recordFailure(account, failure);
        if (failure.kind === "auth" && account.disabled) await this.storeDisabled(account, account.disabled);
        if (failure.kind === "rejected") fail(new UpstreamRejected(failure.message), account.cfg.id);
        if (failure.final) fail(this.finalError(failure), account.cfg.id);
        if (this.clock() >= deadline) fail(this.finalError(failure), account.cfg.id);
      } finally {
        timer.cancel();
        attemptScope.release();
        this.state.release(lease);
        this.changed();
      }
    }
    return fail(last ? this.finalError(last.failure) : new UpstreamFailed("no attempt was made"));
  }

  /** An account and its lease without waiting, when nobody waits, the flags are fresh and the state answers at once. */
  private takeAtOnce(tried: string[] | null): TakenAccount | null {
    const immediate = this.state.immediate;
    if (!immediate || this.queue.length > 0 || this.flagsReading || this.flagsStale(this.clock())) return null;
    const now = this.clock();
    const account = this.pick(now, tried, this.peekState);
    const lease = account && immediate.takeNow(account.cfg.id, account.cfg.maxConcurrency, now);
    return account && lease ? { account, lease } : null;
  }

  /**
   * Waits for an account with free capacity, first come first served: only the request at the
   * head of the wait queue picks (re-reading the disabled flags and cooldowns), the others just
   * wait. Null when no account can be picked (the attempts end); `fail` throws the request's
   * typed error (with its trace) when there is no point in waiting.
   */
  private async waitForAccount(
    request: CancelScope,
    tried: string[] | null,
    last: LastFailure | null,
    started: number,
    deadline: number,
    fail: (e: EngineError) => never,
  ): Promise<TakenAccount | null> {
    const queueDeadline = started + Math.min(this.settings.queueTimeoutMs, this.settings.deadlineMs);
    const ticket = {};
    try {
      for (;;) {
        let now = this.clock();
        const until = Math.min(queueDeadline, deadline);
        if (this.queue.length === 0 || this.queue[0] === ticket) {
          if (this.flagsReading || this.flagsStale(now)) {
            if (!this.flagsReading) this.flagsCheckedAt = now;
            await this.readFlags(this.store.externalRevision !== undefined);
            now = this.clock();
          }
          const usable = this.accounts.filter((a) => !a.disabled);
          if (usable.length === 0) {
            fail(new UpstreamUnavailable(`every account of upstream '${this.upstreamId}' is disabled; an admin must re-enable one (atelier upstreams enable)`));
          }
          let view: Map<string, SharedAccountState>;
          try {
            view = await this.state.read(this.accountIds, now);
          } catch (e) {
            fail(this.stateUnavailable(e));
          }
          now = this.clock();
          const chosen = this.pick(now, tried, (a) => view!.get(a.cfg.id) ?? this.state.known(a.cfg.id));
          if (chosen) {
            let lease: AccountLease | null = null;
            try {
              lease = await this.state.take(chosen.cfg.id, chosen.cfg.maxConcurrency, now);
            } catch (e) {
              fail(this.stateUnavailable(e));
            }
            if (lease) return { account: chosen, lease };
            // Taken meanwhile (by a request of this or another instance): look again.
            if (this.clock() < until) continue;
          }
          const coolingUntil = (a: AccountRuntime) => view!.get(a.cfg.id)?.coolingUntil ?? 0;
          if (usable.every((a) => coolingUntil(a) > now)) {
            // Everything usable is resting: report what the last attempt saw, or the earliest recovery.
            if (last && last.failure.kind !== "rate_limited") fail(this.finalError(last.failure));
            const earliest = Math.min(...usable.map(coolingUntil));
            fail(new UpstreamRateLimited(`every account of upstream '${this.upstreamId}' is cooling down`, Math.max(1, earliest - now)));
          }
        }
        if (now >= until) {
          if (last) fail(this.finalError(last.failure));
          fail(new EngineTimeout(`no account of upstream '${this.upstreamId}' had free capacity within ${until - started} ms`));
        }
        if (!this.queue.includes(ticket)) this.queue.push(ticket);
        await this.waitForChange(until - now, request);
        if (request.aborted) fail(new EngineTimeout("the request was cancelled or ran out of time"));
      }
    } finally {
      const at = this.queue.indexOf(ticket);
      if (at >= 0) this.queue.splice(at, 1);
      if (at === 0) this.wakeWaiters(); // the next in line may find capacity too
    }
  }

  private get accountIds(): string[] {
    return this.accounts.map((a) => a.cfg.id);
  }

  /** The shared state (Redis) did not answer: the request ends cleanly, refunded by the flow. */
  private stateUnavailable(e: unknown): EngineError {
    const why = e instanceof Error ? e.message : String(e);
    this.logger?.warn("upstream pool state unavailable", { upstream: this.upstreamId, error: this.redactor.message(why, FAILURE_MESSAGE_CHARS) });
    return new UpstreamUnavailable(`the shared state of upstream '${this.upstreamId}' is unavailable: ${why}`);
  }

  /** The failure with its message redacted (the same object when there was nothing to remove). */
  private redacted(f: AttemptFailure): AttemptFailure {
    const message = this.redactor.message(f.message);
    return message === f.message ? f : new AttemptFailure(f.kind, message, f.retryAfterMs, f.status, f.final);
  }

  /** The typed error a request ends with when its last attempt failed this way. */
  private finalError(f: AttemptFailure): EngineError {
    if (f.kind === "timeout") return new EngineTimeout(`upstream '${this.upstreamId}': ${f.message}`);
    if (f.kind === "rate_limited") {
      const now = this.clock();
      // The earliest recovery among resting accounts; if one is not resting, try again soon.
      const until = (a: AccountRuntime) => this.state.known(a.cfg.id).coolingUntil;
      const resting = this.accounts.filter((a) => !a.disabled && until(a) > now);
      const earliest = resting.length === this.accounts.filter((a) => !a.disabled).length && resting.length > 0 ? Math.min(...resting.map(until)) : now + RATE_LIMIT_BASE_MS;
      return new UpstreamRateLimited(`upstream '${this.upstreamId}': ${f.message}`, Math.max(1, earliest - now));
    }
    if (f.kind === "auth" && this.accounts.every((a) => a.disabled)) {
      return new UpstreamUnavailable(`every account of upstream '${this.upstreamId}' is disabled after refusing its credentials`);
    }
    return new UpstreamFailed(`upstream '${this.upstreamId}': ${f.message}`);
  }

  private capacity(a: AccountRuntime, s: SharedAccountState, now: number): number {
    if (a.disabled || s.coolingUntil > now) return 0;
    return s.probeNeeded ? 1 : a.cfg.maxConcurrency;
  }

  /**
   * Least loaded by weight, untried accounts first, weighted round robin between equals.
   * Two passes over the accounts instead of filtered copies: this runs on every request.
   */
  private pick(now: number, tried: readonly string[] | null, stateOf: (a: AccountRuntime) => Readonly<SharedAccountState>): AccountRuntime | null {
    let lowest = Infinity;
    let lowestUntried = Infinity;
    for (const a of this.accounts) {
      const s = stateOf(a);
      if (s.inFlight >= this.capacity(a, s, now)) continue;
      const load = s.inFlight / a.cfg.weight;
      if (load < lowest) lowest = load;
      if (load < lowestUntried && !tried?.includes(a.cfg.id)) lowestUntried = load;
    }
    if (lowest === Infinity) return null;
    const untriedOnly = lowestUntried !== Infinity;
    const best = untriedOnly ? lowestUntried : lowest;
    let chosen: AccountRuntime | null = null;
    let total = 0;
    for (const a of this.accounts) {
      const s = stateOf(a);
      if (s.inFlight >= this.capacity(a, s, now) || s.inFlight / a.cfg.weight !== best) continue;
      if (untriedOnly && tried?.includes(a.cfg.id)) continue;
      total += a.cfg.weight;
      a.wrr += a.cfg.weight;
      if (!chosen || a.wrr > chosen.wrr) chosen = a;
    }
    chosen!.wrr -= total;
    return chosen;
  }

  /** The state as this process last saw it, without a copy when the state allows. */
  private readonly peekState = (a: AccountRuntime): Readonly<SharedAccountState> => this.state.immediate?.peek(a.cfg.id) ?? this.state.known(a.cfg.id);

  /** Whether a success has anything to clear (a healthy account costs no write, and no await). */
  private hasFailureCounts(a: AccountRuntime): boolean {
    const s = this.peekState(a);
    return s.consecutiveFailures !== 0 || s.rateLimitStreak !== 0 || s.probeNeeded;
  }

  /** Clears the account's failure counts (called only when hasFailureCounts). */
  private async recordSuccess(a: AccountRuntime): Promise<void> {
    const wasProbe = this.peekState(a).probeNeeded;
    try {
      await this.state.succeeded(a.cfg.id);
    } catch (e) {
      this.stateUnavailable(e); // logged; the answer stands
      return;
    }
    if (wasProbe) this.logger?.info("upstream account healthy again", { upstream: this.upstreamId, account: a.cfg.id });
  }

  private async recordFailure(a: AccountRuntime, f: AttemptFailure): Promise<void> {
    const now = this.clock();
    if (f.kind === "rejected") return; // the request was at fault, not the account
    const message = this.redactor.message(f.message, FAILURE_MESSAGE_CHARS);
    a.recentFailures.push({ at: now, kind: f.kind, message });
    if (a.recentFailures.length > RECENT_FAILURES) a.recentFailures.shift();
    const fields = { upstream: this.upstreamId, account: a.cfg.id, kind: f.kind, status: f.status ?? null, message };
    if (f.kind === "auth") {
      const reason = this.redactor.message(`upstream answered ${f.status ?? "401/403"}: ${f.message}`, FAILURE_MESSAGE_CHARS);
      a.disabled = { reason, at: now };
      this.logger?.warn("upstream account disabled until an admin re-enables it", fields);
      return;
    }
    try {
      if (f.kind === "rate_limited") {
        const { count: streak } = await this.state.failed(a.cfg.id, "rate_limited");
        const backoff = Math.min(RATE_LIMIT_BASE_MS * 2 ** (streak - 1), this.settings.rateLimitCooldownMaxMs);
        const ms = f.retryAfterMs !== undefined ? Math.min(f.retryAfterMs, MAX_RETRY_AFTER_MS) : backoff;
        await this.state.coolDown(a.cfg.id, ms, false, now);
        this.logger?.warn("upstream account rate limited; cooling down", { ...fields, cooling_ms: ms });
        return;
      }
      const { count, probeNeeded } = await this.state.failed(a.cfg.id, "failed");
      if (probeNeeded || count >= this.settings.failureThreshold) {
        const over = Math.max(0, count - this.settings.failureThreshold);
        const ms = Math.min(this.settings.failureCooldownMs * 2 ** over, this.settings.failureCooldownMaxMs);
        await this.state.coolDown(a.cfg.id, ms, true, now);
        this.logger?.warn("upstream account failing; cooling down before a probe", { ...fields, consecutive_failures: count, cooling_ms: ms });
      } else {
        this.logger?.warn("upstream attempt failed", fields);
      }
    } catch (e) {
      this.stateUnavailable(e); // logged; the request goes on with what it has
    }
  }

  /**
   * The flag was set in memory at once (this process stops using the account); storing it lets
   * an admin see and clear it, in this process or another. A store that is momentarily away
   * costs the persistence, not the request.
   */
  private async storeDisabled(a: AccountRuntime, info: DisabledInfo): Promise<void> {
    try {
      await this.store.disableAccount(this.upstreamId, a.cfg.id, info.reason, info.at);
    } catch (e) {
      this.logger?.warn("could not store an upstream account's disabled flag", { upstream: this.upstreamId, account: a.cfg.id, error: this.redactor.message(String(e), FAILURE_MESSAGE_CHARS) });
    }
  }

  /**
   * Whether a pick should look at the flags again (the reader then sets flagsCheckedAt). They
   * are re-read only when another process wrote to the store (its external revision moved),
   * checked at most every FLAGS_CHECK_MS: this process's own changes go through the pool (a
   * disable) or call refresh() (an enable). A store without a revision is read on every pick.
   */
  private flagsStale(now: number): boolean {
    if (!this.store.externalRevision) return true;
    return !(now - this.flagsCheckedAt < FLAGS_CHECK_MS && now >= this.flagsCheckedAt);
  }

  /** The read under way, or a new one. */
  private readFlags(onlyIfChanged: boolean): Promise<void> {
    return (this.flagsReading ??= this.refreshDisabled(onlyIfChanged).finally(() => {
      this.flagsReading = null;
    }));
  }

  /** Disabled flags live in the store so an admin in another process can clear them. */
  private async refreshDisabled(onlyIfChanged = false): Promise<void> {
    let revision: number | undefined;
    let rows: Map<string, DisabledInfo>;
    try {
      revision = await this.store.externalRevision?.();
      if (onlyIfChanged && revision !== undefined && revision === this.flagsRevision) return;
      rows = await this.store.disabledAccounts(this.upstreamId);
    } catch {
      return; // keep the last known flags if the store is momentarily unavailable
    }
    this.flagsRevision = revision;
    for (const a of this.accounts) {
      const row = rows.get(a.cfg.id) ?? null;
      if (a.disabled && !row) {
        // Re-enabled by an admin: start fresh.
        await this.state.reset(a.cfg.id).catch((e) => this.stateUnavailable(e));
        this.logger?.info("upstream account re-enabled", { upstream: this.upstreamId, account: a.cfg.id });
      }
      a.disabled = row && { ...row, reason: this.redactor.message(row.reason, FAILURE_MESSAGE_CHARS) };
    }
  }

  private waitForChange(ms: number, request: CancelScope): Promise<void> {
    return new Promise((resolve) => {
      let stopListening = () => {};
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        stopListening();
        resolve();
      };
      // Also wake when a cooldown ends, since that frees capacity without a release, and, with a
      // shared state, every pollMs (another instance's release is not signalled here).
      const now = this.clock();
      const rests = this.accounts.map((a) => this.state.known(a.cfg.id).coolingUntil).filter((t) => t > now);
      const nextRecovery = Math.min(...rests.map((t) => t - now), this.state.pollMs ?? Infinity);
      const timer = setTimeout(done, Math.max(1, Math.min(ms, nextRecovery)));
      this.waiters.add(done);
      stopListening = request.onAbort(done);
    });
  }

  private changed(): void {
    this.wakeWaiters();
    this.scheduleSnapshot();
  }

  private wakeWaiters(): void {
    if (this.waiters.size === 0) return;
    for (const w of [...this.waiters]) w();
  }

  private scheduleSnapshot(): void {
    if (this.snapshotTimer || this.closed) return;
    this.snapshotTimer = setTimeout(() => {
      this.snapshotTimer = null;
      void this.persistSnapshot();
    }, SNAPSHOT_THROTTLE_MS);
    (this.snapshotTimer as { unref?: () => void }).unref?.();
  }

  /** Writes the current state now (also called at start and by tests). */
  async persistSnapshot(): Promise<void> {
    if (this.closed) return;
    try {
      await this.store.saveSnapshot(this.upstreamId, this.snapshot(), this.clock());
    } catch {
      // The snapshot is informational; a closed or busy database must not break requests.
    }
  }

  /** Re-reads the disabled flags from the store (an admin may have changed them). */
  async refresh(): Promise<void> {
    await Promise.all([this.refreshDisabled(), this.state.read(this.accountIds, this.clock()).catch(() => undefined)]);
  }

  snapshot(): AccountSnapshot[] {
    const now = this.clock();
    return this.accounts.map((a) => {
      const s = this.state.known(a.cfg.id);
      const cooling = s.coolingUntil > now;
      const state: AccountHealth = a.disabled ? "disabled" : cooling ? "cooling" : s.probeNeeded ? "probing" : "healthy";
      return {
        upstreamId: this.upstreamId,
        accountId: a.cfg.id,
        weight: a.cfg.weight,
        capacity: a.cfg.maxConcurrency,
        inFlight: s.inFlight,
        state,
        coolingUntil: cooling ? s.coolingUntil : null,
        disabledReason: a.disabled?.reason ?? null,
        disabledAt: a.disabled?.at ?? null,
        consecutiveFailures: s.consecutiveFailures,
        recentFailures: [...a.recentFailures],
      };
    });
  }

  /** Attempts and failures (by kind) per account since the process started. */
  attemptCounts(): AccountAttemptCounts[] {
    return this.accounts.map((a) => ({ upstreamId: this.upstreamId, accountId: a.cfg.id, attempts: a.attempts, failures: new Map(a.failures) }));
  }

  /** Writes a last snapshot, then stops background writes (the store is about to close). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.snapshotTimer) clearTimeout(this.snapshotTimer);
    this.snapshotTimer = null;
    this.state.close();
    // So `atelier upstreams` shows the state at the stop, not mid-request.
    try {
      await this.store.saveSnapshot(this.upstreamId, this.snapshot(), this.clock());
    } catch {
      // The store may already be closing; the snapshot is informational.
    }
  }
}
