/**
 * Prometheus metrics (prom-client, one Registry per app so that servers in one process do not
 * share series). The request counters and histograms are fed by the server wrapper and the
 * image flow; gauges (gates, pools) and the cheap SQL figures (the credit counters and
 * pending requests, both read through an index) are read at scrape time; the ledger invariant,
 * a pass over the whole ledger, is recomputed every `[metrics] ledger_check_interval_s` and at a
 * scrape that finds it older than that.
 *
 * Credits charged, refunded, granted and deducted are counters read from the ledger: each
 * refresh adds the amounts of the rows after the last one seen, so grants made by the CLI in
 * another process count too, and a restart resumes from the ledger's lifetime totals.
 */
import { timingSafeEqual } from "node:crypto";
import { Elysia } from "elysia";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { Gate } from "../core/gate";
import type { ImageTimings } from "../core/imageRequests";
import type { LedgerRow } from "../core/store";
import type { AccountPool } from "../engines/pool";
import type { Store } from "../store";
import { notFound, unauthorized } from "./errors";
import { metaOf } from "./requestMeta";
import { RequestMetrics } from "./requestMetrics";
import { timerDelay } from "../core/timerDelay";

export interface MetricsSettings {
  /** The bearer token a scrape must send; without one, /metrics answers 404. */
  token?: string;
  ledgerCheckIntervalMs: number;
}

export interface MetricsSources {
  store: Store;
  gates: { image: Gate; chat: Gate };
  pools: () => AccountPool[];
  /** HTTP requests being answered right now. */
  inFlight: () => number;
}

/** The period of the event loop delay's sampling timer (prom-client's eventLoopMonitoringPrecision). */
export const EVENT_LOOP_SAMPLE_MS = 100;

export const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const IMAGE_ROUTE = { generate: "/v1/images/generations", edit: "/v1/images/edits" } as const;
const ACCOUNT_STATES = ["healthy", "cooling", "probing", "disabled"] as const;
const LEDGER_KINDS: LedgerRow["kind"][] = ["charge", "refund", "grant", "deduct", "redeem"];

/**
 * The registry's exposition text. prom-client writes a NaN sample as `Nan`; the exposition format
 * (and strict OpenMetrics parsers, which then refuse the whole scrape) spell it `NaN`. The event
 * loop delay's mean is NaN when a scrape follows the last one within EVENT_LOOP_SAMPLE_MS (no
 * sample since its reset).
 */
export async function exposition(registry: Registry): Promise<string> {
  return (await registry.metrics()).replace(/ Nan$/gm, " NaN");
}

export class Metrics {
  readonly registry = new Registry();
  private readonly requests: RequestMetrics;
  private readonly imageSeconds: Histogram<"route" | "phase">;
  private readonly invariant: Gauge;
  private readonly credits: Counter<"kind">;
  private readonly pending: Gauge;
  private lastLedgerId = 0;
  /** The ledger read in flight (readLedgerDeltas chains on it). */
  private deltas: Promise<void> = Promise.resolve();
  private refreshedAt = -Infinity;
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly sources: MetricsSources,
    readonly settings: MetricsSettings,
  ) {
    const registers = [this.registry];
    // prom-client samples the event loop's delay with a timer of this period (its default, 10 ms,
    // woke an idle server a hundred times a second: 0.8 % of a core doing nothing). A stall
    // longer than the period is still always seen; shorter ones are what the request latency
    // histogram shows anyway.
    collectDefaultMetrics({ register: this.registry, prefix: "atelier_process_", eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    this.requests = new RequestMetrics(this.registry, LATENCY_BUCKETS);
    this.imageSeconds = new Histogram({
      name: "atelier_image_phase_duration_seconds",
      help: "Charged image requests: time in the gate's queue, in generation, and upstream (the successful or last attempt).",
      labelNames: ["route", "phase"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    new Gauge({ name: "atelier_http_requests_in_flight", help: "HTTP requests being answered.", registers, collect() { this.set(sources.inFlight()); } });
    new Gauge({
      name: "atelier_gate_in_flight",
      help: "Requests holding a gate slot.",
      labelNames: ["gate"],
      registers,
      collect() {
        this.set({ gate: "image" }, sources.gates.image.stats().running);
        this.set({ gate: "chat" }, sources.gates.chat.stats().running);
      },
    });
    new Gauge({
      name: "atelier_gate_queue_depth",
      help: "Requests waiting in a gate's queue.",
      labelNames: ["gate"],
      registers,
      collect() {
        this.set({ gate: "image" }, sources.gates.image.stats().queued);
        this.set({ gate: "chat" }, sources.gates.chat.stats().queued);
      },
    });
    new Gauge({
      name: "atelier_upstream_accounts",
      help: "Upstream accounts by state.",
      labelNames: ["upstream", "state"],
      registers,
      collect() {
        this.reset();
        for (const pool of sources.pools()) {
          const accounts = pool.snapshot();
          for (const state of ACCOUNT_STATES) this.set({ upstream: pool.upstreamId, state }, accounts.filter((a) => a.state === state).length);
        }
      },
    });
    new Counter({
      name: "atelier_upstream_attempts_total",
      help: "Attempts started on an upstream account.",
      labelNames: ["upstream", "account"],
      registers,
      collect() {
        this.reset();
        for (const pool of sources.pools()) for (const a of pool.attemptCounts()) this.inc({ upstream: a.upstreamId, account: a.accountId }, a.attempts);
      },
    });
    new Counter({
      name: "atelier_upstream_failures_total",
      help: "Failed attempts on an upstream account, by kind (rate_limited, auth, rejected, failed, timeout).",
      labelNames: ["upstream", "account", "kind"],
      registers,
      collect() {
        this.reset();
        for (const pool of sources.pools()) {
          for (const a of pool.attemptCounts()) for (const [kind, n] of a.failures) this.inc({ upstream: a.upstreamId, account: a.accountId, kind }, n);
        }
      },
    });
    this.credits = new Counter({ name: "atelier_credits_total", help: "Credits moved by the ledger, by kind: charge, refund, grant, deduct, redeem.", labelNames: ["kind"], registers });
    for (const kind of LEDGER_KINDS) this.credits.inc({ kind }, 0);
    this.pending = new Gauge({ name: "atelier_image_requests_pending", help: "Image requests charged and not yet finished.", registers });
    this.invariant = new Gauge({ name: "atelier_ledger_mismatched_users", help: "Users whose balance differs from the sum of their ledger rows; must be 0.", registers });
  }

  observeRequest(route: string, method: string, status: number, seconds: number): void {
    this.requests.observe(route, method, status, seconds);
  }

  observeImage(t: ImageTimings): void {
    const route = IMAGE_ROUTE[t.kind];
    this.imageSeconds.observe({ route, phase: "queue" }, t.queueMs / 1000);
    this.imageSeconds.observe({ route, phase: "generation" }, t.generationMs / 1000);
    if (t.upstreamMs !== null) this.imageSeconds.observe({ route, phase: "upstream" }, t.upstreamMs / 1000);
  }

  /** Recomputes the ledger invariant; a failure keeps the last value. */
  async checkLedger(now = performance.now()): Promise<void> {
    this.refreshedAt = now;
    try {
      this.invariant.set(await this.sources.store.credits.ledgerMismatches());
    } catch {
      // A locked or closing database: the next check tries again.
    }
  }

  /**
   * Adds the ledger rows written since the last look to the credit counters, and reads pending
   * requests. One read at a time (chained): two scrapes at once must not count the same rows twice.
   */
  private readLedgerDeltas(): Promise<void> {
    this.deltas = this.deltas.then(async () => {
      const { credits, requests } = this.sources.store;
      try {
        const since = await credits.ledgerTotalsSince(this.lastLedgerId);
        for (const [kind, total] of since.byKind) this.credits.inc({ kind }, total);
        this.lastLedgerId = since.lastId;
        this.pending.set(await requests.pendingCount());
      } catch {
        // A locked or closing database: the next scrape tries again.
      }
    });
    return this.deltas;
  }

  /** The exposition text; rechecks the ledger invariant first when it is older than the interval. */
  async scrape(): Promise<string> {
    if (performance.now() - this.refreshedAt >= this.settings.ledgerCheckIntervalMs) await this.checkLedger();
    await this.readLedgerDeltas();
    return exposition(this.registry);
  }

  start(): void {
    void this.checkLedger();
    this.timer ??= setInterval(() => void this.checkLedger(), timerDelay(this.settings.ledgerCheckIntervalMs));
    (this.timer as { unref?: () => void }).unref?.();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** True when the request carries the configured bearer token (compared in constant time). */
  authorized(request: Request): boolean {
    const expected = this.settings.token;
    if (expected === undefined) return false;
    const given = /^Bearer (.+)$/i.exec(request.headers.get("authorization") ?? "")?.[1] ?? "";
    const a = Buffer.from(given);
    const b = Buffer.from(expected);
    return a.length === b.length && timingSafeEqual(a, b);
  }
}

/** The route pattern Elysia matched for this request (set by the hook in metricsRoutes), or "unmatched". */
export function routeOf(request: Request): string {
  return metaOf(request).route ?? "unmatched";
}

/**
 * GET /metrics (not in the OpenAPI document): 404 when no token is configured, 401 without the
 * right bearer token. Also records, for every request, the route pattern it matched.
 */
export function metricsRoutes(deps: { metrics: Metrics }) {
  const { metrics } = deps;
  return new Elysia({ name: "metrics" })
    .onTransform({ as: "global" }, ({ request, route }) => {
      metaOf(request).route = route;
    })
    .get(
      "/metrics",
      async ({ request }) => {
        if (metrics.settings.token === undefined) throw notFound("Metrics are off: set [metrics] token to serve them.", null, "metrics_disabled");
        if (!metrics.authorized(request)) throw unauthorized("Send the metrics token ([metrics] token) as 'Authorization: Bearer …'.", "invalid_metrics_token");
        return new Response(await metrics.scrape(), { headers: { "content-type": metrics.registry.contentType } });
      },
      { detail: { hide: true } },
    );
}
