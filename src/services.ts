/**
 * createServices(deps) builds everything the routes and the server share, once: the one wiring
 * place of the service (config, store and logger in; gates, engines, pools, auth out).
 */
import type { Config } from "./config";
import { KeyAuthenticator } from "./core/accounts";
import { BackgroundWork } from "./core/background";
import { LocalGate, type Gate, type GateLimits } from "./core/gate";
import { RedisGate } from "./core/redisGate";
import { RedisClient } from "bun";
import { RedisPoolState } from "./engines/redisPoolState";
import { redisAttemptCounters } from "./core/redisAttemptLimiter";
import { ModelCatalog } from "./core/models";
import { BuiltinChatEngine } from "./engines/builtin/chatEngine";
import { BuiltinImageEngine } from "./engines/builtin/imageEngine";
import { EngineRegistry } from "./engines/registry";
import { registerUpstreamEngines, type UpstreamPools } from "./engines/upstreams";
import type { ApiAuthDeps } from "./http/auth";
import { BodyBudget } from "./http/body";
import { sessionPrincipalResolver } from "./http/workbench/sessionPrincipal";
import type { Logger } from "./logger";
import type { Store } from "./store";
import { createWorkbench, type Workbench } from "./http/workbench/workbench";
import type { Clock } from "./core/clock";
import type { ImageFlowDeps } from "./core/imageRequests";
import { TaskRunner } from "./core/taskRunner";
import { describeFailure } from "./http/errorMapping";
import { WebhookDispatcher } from "./core/webhooks";
import { SecretBox } from "./core/webhooksSecretBox";
import { loadWebhookSecretKey, webhookSecretKeyExists } from "./store/webhooks";
import { join } from "node:path";
import { ImageArchive, ImageSweeper, type ImageBlobStore } from "./core/imageArchive";
import { ImageLinks } from "./core/imageLinks";
import { ImageThumbnails } from "./core/imageThumbnails";
import { decodeImageOffThread, encodePng } from "./core/image/codec";
import { FileImageBlobs, MemoryImageBlobs } from "./store/imageFiles";
import { S3ImageBlobs, s3BlobSettingsOf } from "./store/s3ImageBlobs";
import { Metrics } from "./http/metrics";
import { InstanceLiveness } from "./core/instances";
import { storeDialect } from "./store/open";
import { hostname } from "node:os";

export interface AppDeps {
  config: Config;
  store: Store;
  logger: Logger;
  clock?: Clock;
}

/** Everything the routes share, built once from AppDeps. */
export interface Services {
  config: Config;
  store: Store;
  logger: Logger;
  clock: Clock;
  catalog: ModelCatalog;
  budget: BodyBudget;
  auth: ApiAuthDeps;
  background: BackgroundWork;
  engines: EngineRegistry;
  /** Workbench sessions, sign-in and the first-admin setup token. */
  workbench: Workbench;
  /** One account pool per [[upstreams]] entry (its engine is registered in `engines`). */
  upstreams: UpstreamPools;
  /** The concurrency gates, built from [limits]: image requests queue; chat does not. */
  gates: { image: Gate; chat: Gate };
  /** The connection behind the gates when [redis] url is set (readiness pings it; the server closes it). */
  redis: RedisClient | undefined;
  /** What the image flow needs, shared by the synchronous routes and the async task runner. */
  imageFlow: ImageFlowDeps;
  /** Async image tasks: the durable queue and its runner (started and stopped by the server). */
  tasks: TaskRunner;
  /** Every successful image, kept ([storage]); its sweep is started and stopped by the server. */
  images: ImageArchive;
  /** With [storage] kind = "s3": one small call that resolves when the bucket answers (readiness reports it). */
  imageStorageProbe: ((timeoutMs: number) => Promise<void>) | undefined;
  imageSweeper: ImageSweeper;
  /** Signed, expiring links to kept images (`response_format: "url"`). */
  imageLinks: ImageLinks;
  /** The gallery's thumbnails, made on first view and kept in a bounded in-memory cache. */
  thumbnails: ImageThumbnails;
  /** Where finished tasks are announced: the webhook dispatcher (its delivery worker is started and stopped by the server). */
  taskEvents: WebhookDispatcher;
  /** The Prometheus registry behind /metrics ([metrics]); its refresh timer is started and stopped by the server. */
  metrics: Metrics;
  /**
   * This instance's heartbeat and the sweep that refunds the requests of instances that stopped
   * (core/instances); started and stopped by the server.
   */
  liveness: InstanceLiveness;
  /** HTTP requests being answered (the server wrapper counts them; 0 under app.handle()). */
  httpInFlight: { count: number };
}

/** builtin-chat answers chat models whose source is the built-in engines; upstream chat engines register by upstream id. */
function withBuiltinChat(engines: EngineRegistry): EngineRegistry {
  engines.registerBuiltinChat(new BuiltinChatEngine());
  return engines;
}

/**
 * Image requests wait in a bounded queue for a slot. Chat has no queue (an excess request gets
 * 429 at once with retry-after; the openai clients retry those by themselves, and a chat reply
 * is short enough that queueing would only hide the overload) and no per-user share below the
 * server-wide limit.
 */
function createGates(limits: Config["limits"], redis: RedisClient | undefined, keyPrefix: string): Services["gates"] {
  const image: GateLimits = {
    subject: "image requests",
    global: limits.generation_concurrency,
    perUser: limits.per_user_concurrency,
    queueSize: limits.queue_size,
    queueTimeoutMs: limits.queue_timeout_ms,
  };
  const chat: GateLimits = { subject: "chat completions", global: limits.chat_concurrency, perUser: limits.chat_concurrency, queueSize: 0, queueTimeoutMs: 0 };
  if (!redis) return { image: new LocalGate(image), chat: new LocalGate(chat) };
  return {
    image: new RedisGate(redis, image, { keyPrefix: `${keyPrefix}gate:image:` }),
    chat: new RedisGate(redis, chat, { keyPrefix: `${keyPrefix}gate:chat:` }),
  };
}

/**
 * One connection for the shared gates ([redis] url), or none. A lost connection reconnects on
 * its own; meanwhile each gate command gives up after its own bound (503 gate_unavailable).
 */
function connectRedis(config: Config): RedisClient | undefined {
  const url = config.redis.url;
  return url === undefined ? undefined : new RedisClient(url, { connectionTimeout: 2_000 });
}

/**
 * Where the archive's bytes live ([storage] kind): files under storage.dir (default
 * data_dir/images; in memory for a `:memory:` server), or an S3-compatible bucket.
 */
function createImageBlobs(config: Config, clock: Clock): ImageBlobStore {
  const { server, storage } = config;
  if (storage.kind === "s3") return new S3ImageBlobs(s3BlobSettingsOf(storage));
  return server.data_dir === ":memory:" && storage.dir === undefined ? new MemoryImageBlobs(clock) : new FileImageBlobs(storage.dir ?? join(server.data_dir, "images"));
}

/** The image archive from [storage]: the bytes in its blob store, rows in the database. */
function createImageArchive(deps: AppDeps, blobs: ImageBlobStore, clock: Clock): ImageArchive {
  const { storage } = deps.config;
  return new ImageArchive({
    records: deps.store.images,
    blobs,
    clock,
    logger: deps.logger,
    // A file younger than an hour without its row may belong to a put in another process.
    settings: { retentionDays: storage.retention_days, maxBytes: storage.max_bytes, orphanGraceMs: 3_600_000 },
  });
}

/** The gallery's thumbnail cache: a 256 px PNG is typically 50–150 kB, so a few hundred of them. */
const THUMBNAIL_CACHE_BYTES = 32 * 1024 * 1024;

/** The key that signs image links: made on first use and kept in the database, so restarts and other processes agree. */
function imageLinkKey(store: Store, clock: Clock): () => Promise<Uint8Array> {
  let key: Promise<Uint8Array> | undefined;
  return () => {
    // A failed read is not kept: the next link asks the database again.
    key ??= store.secrets.getOrCreate("image_links", clock()).catch((e: unknown) => {
      key = undefined;
      throw e;
    });
    return key;
  };
}

/** Webhooks from [webhooks]: secrets sealed under the configured key or data_dir/webhook-secrets.key. */
function createWebhookDispatcher(deps: AppDeps, clock: Clock): WebhookDispatcher {
  const c = deps.config.webhooks;
  const dataDir = deps.config.server.data_dir;
  const key = () => (c.secret_key !== undefined ? Buffer.from(c.secret_key, "base64") : loadWebhookSecretKey(dataDir));
  return new WebhookDispatcher({
    records: deps.store.webhooks,
    box: new SecretBox(key),
    keyExists: () => c.secret_key !== undefined || webhookSecretKeyExists(dataDir),
    whenWritable: deps.store.whenWritable,
    clock,
    logger: deps.logger,
    settings: {
      allowPrivateAddresses: c.allow_private_addresses,
      retryDelaysMs: c.retry_delays_ms,
      attemptTimeoutMs: c.attempt_timeout_ms,
      concurrency: c.concurrency,
      pollIntervalMs: c.poll_interval_ms,
      rotationOverlapMs: c.rotation_overlap_s * 1000,
    },
  });
}

/** How often an instance sharing its database looks for tasks queued by the others. */
const TASK_POLL_MS = 1_000;

/** The heartbeat under the store's instance id ([instance]); refunds go through the ledger's one refund path. */
function createLiveness(deps: AppDeps, clock: Clock, taskRetentionMs: number): InstanceLiveness {
  const { instance } = deps.config;
  return new InstanceLiveness(
    { id: deps.store.instanceId, host: hostname(), heartbeatMs: instance.heartbeat_ms, leaseMs: instance.lease_ms },
    {
      records: deps.store.instances,
      refundInterrupted: (id, reason) =>
        deps.store.whenWritable(() => deps.store.credits.refundInterrupted(id, reason, clock(), taskRetentionMs), { maxWaitMs: deps.config.database.busy_wait_ms }),
      clock,
      logger: deps.logger,
    },
  );
}

export function createServices(deps: AppDeps): Services {
  const clock = deps.clock ?? Date.now;
  deps.store.requests.onDroppedRows = (count, error) => deps.logger.error("chat history rows could not be written and were dropped", { count, error: String(error) });
  const redis = connectRedis(deps.config);
  const keyPrefix = deps.config.redis.key_prefix;
  // With [redis] url, sign-in and redemption attempts are counted across every instance.
  const attemptCounters = redis ? redisAttemptCounters(redis, { keyPrefix: `${keyPrefix}attempts:` }) : undefined;
  const workbench = createWorkbench({ config: deps.config, store: deps.store, clock, logger: deps.logger, ...(attemptCounters ? { attemptCounters } : {}) });
  const imageBlobs = createImageBlobs(deps.config, clock);
  const images = createImageArchive(deps, imageBlobs, clock);
  const services: Omit<Services, "upstreams" | "imageFlow" | "tasks" | "taskEvents" | "metrics" | "liveness" | "httpInFlight"> = {
    config: deps.config,
    store: deps.store,
    logger: deps.logger,
    clock,
    catalog: new ModelCatalog(deps.config),
    budget: new BodyBudget(deps.config.server.max_body_bytes, deps.config.server.max_inflight_body_bytes, deps.config.limits.queue_timeout_ms),
    auth: { keys: new KeyAuthenticator(deps.store, clock), sessionPrincipal: sessionPrincipalResolver(workbench, deps.config) },
    workbench,
    background: new BackgroundWork(),
    engines: withBuiltinChat(new EngineRegistry()),
    gates: createGates(deps.config.limits, redis, deps.config.redis.key_prefix),
    redis,
    images,
    imageStorageProbe: imageBlobs instanceof S3ImageBlobs ? (timeoutMs) => imageBlobs.probe(timeoutMs) : undefined,
    imageSweeper: new ImageSweeper(images, deps.config.storage.sweep_interval_s * 1000, deps.logger),
    imageLinks: new ImageLinks(imageLinkKey(deps.store, clock), deps.config.storage.url_ttl_s * 1000, clock),
    thumbnails: new ImageThumbnails({
      read: async (image) => (await images.open(image.id))?.bytes ?? null,
      decode: decodeImageOffThread,
      encodePng,
      maxCacheBytes: THUMBNAIL_CACHE_BYTES,
    }),
  };
  // builtin-image draws offline for image models whose source is the built-in engines.
  services.engines.registerBuiltinImage(new BuiltinImageEngine());
  // With [redis] url every instance shares each account's in-flight count, rests and probes.
  const poolState = redis ? (upstreamId: string) => new RedisPoolState(redis, { keyPrefix: `${keyPrefix}pool:${upstreamId}:` }) : undefined;
  const upstreams = registerUpstreamEngines(deps.config, services.engines, { store: deps.store.upstreams, clock, logger: deps.logger, ...(poolState ? { poolState } : {}) });
  const httpInFlight = { count: 0 };
  const metrics = new Metrics(
    { store: deps.store, gates: services.gates, pools: () => upstreams.list(), inFlight: () => httpInFlight.count },
    { token: deps.config.metrics.token, ledgerCheckIntervalMs: deps.config.metrics.ledger_check_interval_s * 1000 },
  );
  const imageFlow: ImageFlowDeps = {
    store: deps.store,
    gate: services.gates.image,
    engines: services.engines,
    background: services.background,
    logger: deps.logger,
    clock,
    generationTimeoutMs: deps.config.limits.generation_timeout_ms,
    busyWaitMs: deps.config.database.busy_wait_ms,
    describeFailure,
    images,
    observeTimings: (t) => metrics.observeImage(t),
  };
  const taskEvents = createWebhookDispatcher(deps, clock);
  const { limits } = deps.config;
  const tasks = new TaskRunner({
    ...imageFlow,
    catalog: services.catalog,
    events: { taskFinished: (event) => taskEvents.taskFinished(event) },
    limits: { concurrency: limits.async_concurrency, perUserConcurrency: limits.async_per_user_concurrency, queueSize: limits.async_queue_size, perUserQueueSize: limits.async_per_user_queue_size },
    retentionMs: deps.config.tasks.retention_hours * 3_600_000,
    // Another instance may queue a task this one has room for: look for them now and then.
    pollMs: storeDialect(deps.config) === "postgres" ? TASK_POLL_MS : 0,
  });
  const liveness = createLiveness(deps, services.clock, tasks.retentionMs);
  return { ...services, upstreams, imageFlow, tasks, taskEvents, metrics, liveness, httpInFlight };
}

