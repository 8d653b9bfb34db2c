/**
 * Builds one account pool and one engine per [[upstreams]] entry and registers the engine
 * under the upstream id, which is what a catalog model's source names ({ kind: "upstream" }).
 */
import type { Config, UpstreamConfig } from "../config";
import { sendsOnlyApiKey } from "./credentials";
import { AccountPool, type PoolLogger, type PoolStateStore } from "./pool";
import { OpenAIEngine } from "./openai";
import { SecretRedactor } from "./redact";
import type { EngineRegistry } from "./registry";
import { SdWebUiEngine } from "./sdwebui";
import { ComfyUIEngine } from "./comfyui";
import { QueueEngine } from "./queue";
import { FalTranslator } from "./fal";
import { ReplicateTranslator } from "./replicate";
import { BflTranslator } from "./bfl";
import { GeminiEngine } from "./gemini";
import type { Clock } from "../core/clock";
import { LocalPoolState, type PoolState } from "./poolState";

/** The pools by upstream id, for the admin route and for a graceful stop. */
export class UpstreamPools {
  constructor(readonly byId: Map<string, AccountPool>) {}

  get(upstreamId: string): AccountPool | undefined {
    return this.byId.get(upstreamId);
  }

  list(): AccountPool[] {
    return [...this.byId.values()];
  }

  /** Writes every pool's last snapshot and stops their background writes. */
  async close(): Promise<void> {
    await Promise.all([...this.byId.values()].map((p) => p.close()));
  }
}

export function poolFor(
  upstream: UpstreamConfig,
  config: Config,
  store: PoolStateStore,
  clock: Clock,
  logger?: PoolLogger,
  redactor: SecretRedactor = SecretRedactor.forUpstreams(config.upstreams),
  state: PoolState = new LocalPoolState(),
): AccountPool {
  return new AccountPool(
    upstream.id,
    upstream.accounts.map((a) => ({ id: a.id, weight: a.weight, maxConcurrency: a.max_concurrency })),
    {
      attemptTimeoutMs: upstream.timeout_ms,
      maxAttempts: upstream.max_attempts,
      deadlineMs: upstream.deadline_ms ?? config.limits.generation_timeout_ms,
      queueTimeoutMs: config.limits.queue_timeout_ms,
      rateLimitCooldownMaxMs: upstream.rate_limit_cooldown_max_ms,
      failureThreshold: upstream.failure_threshold,
      failureCooldownMs: upstream.failure_cooldown_ms,
      failureCooldownMaxMs: upstream.failure_cooldown_max_ms,
    },
    store,
    clock,
    logger,
    redactor,
    state,
  );
}

export function registerUpstreamEngines(
  config: Config,
  registry: EngineRegistry,
  deps: {
    store: PoolStateStore;
    clock: Clock;
    logger?: PoolLogger;
    /** Where each pool keeps its in-flight counts and rests: memory by default, Redis with [redis] url (services.ts). */
    poolState?: (upstreamId: string) => PoolState;
    /** sdwebui progress polling (tests shorten it). */ progressPollMs?: number; /** comfyui history polling (tests shorten it). */ comfyPollMs?: number; /** fal/replicate/bfl: the first status poll (tests shorten it). */ queuePollMs?: number },
): UpstreamPools {
  const pools = new Map<string, AccountPool>();
  // Every account secret of every upstream: no upstream's text may leak any of them.
  const redactor = SecretRedactor.forUpstreams(config.upstreams);
  for (const upstream of config.upstreams) {
    for (const a of upstream.accounts) {
      if (sendsOnlyApiKey(a)) deps.logger?.warn("upstream account sets api_key and username/password; only the api_key is sent", { upstream: upstream.id, account: a.id });
    }
    const pool = poolFor(upstream, config, deps.store, deps.clock, deps.logger, redactor, deps.poolState?.(upstream.id));
    pools.set(upstream.id, pool);
    // One case per engine kind (config.ts Upstream.kind lists them).
    switch (upstream.kind) {
      case "openai": {
        const engine = new OpenAIEngine(upstream, pool, deps.clock, redactor);
        registry.registerUpstreamImage(upstream.id, engine);
        registry.registerUpstreamChat(upstream.id, engine);
        break;
      }
      case "sdwebui":
        registry.registerUpstreamImage(upstream.id, new SdWebUiEngine(upstream, pool, deps.clock, redactor, deps.progressPollMs, deps.logger));
        break;
      case "comfyui":
        registry.registerUpstreamImage(upstream.id, new ComfyUIEngine(upstream, pool, deps.clock, redactor, deps.comfyPollMs));
        break;
      case "fal":
        registry.registerUpstreamImage(upstream.id, new QueueEngine(upstream, pool, deps.clock, new FalTranslator(), redactor, deps.queuePollMs));
        break;
      case "replicate":
        registry.registerUpstreamImage(upstream.id, new QueueEngine(upstream, pool, deps.clock, new ReplicateTranslator(), redactor, deps.queuePollMs));
        break;
      case "bfl":
        registry.registerUpstreamImage(upstream.id, new QueueEngine(upstream, pool, deps.clock, new BflTranslator(), redactor, deps.queuePollMs));
        break;
      case "gemini":
        registry.registerUpstreamImage(upstream.id, new GeminiEngine(upstream, pool, deps.clock, redactor));
        break;
      default: {
        const unknown: never = upstream.kind;
        throw new Error(`no engine for upstream kind ${String(unknown)}`);
      }
    }
    // The CLI's view from the start; a store that is away only delays it (the pool retries on change).
    void pool.persistSnapshot();
  }
  return new UpstreamPools(pools);
}
