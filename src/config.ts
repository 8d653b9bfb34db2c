/**
 * Configuration: an optional TOML file plus environment overrides, validated with TypeBox.
 * One place owns every limit and default; other modules read the typed Config.
 */
import { Type as T, type Static, type TSchema } from "@sinclair/typebox";
import { Value, ValueErrorType, type ValueError } from "@sinclair/typebox/value";
import { dirname, resolve } from "node:path";
import { comfyModelSettings, withWorkflowLoaded } from "./engines/comfyui/workflow";
import { pathFromPointer } from "./core/valuePath";
import { DEFAULT_RETRY_DELAYS_MS } from "./core/webhooksSchedule";
import { MAX_MODEL_PRICE } from "./core/limits";

const MiB = 1024 * 1024;

/*
 * Every duration that ends up in a timer has a maximum: setTimeout holds at most 2^31 - 1 ms
 * (core/timerDelay), and a longer value fires after 1 ms instead (a queue timeout that refuses
 * at once, a shutdown grace that drops in-flight requests, a sweep that spins). The maxima are
 * the longest sane settings, well inside that: an hour for a wait, a single call, a poll or a
 * heartbeat; a day for one request's work, a cooldown and the shutdown grace; a week for the
 * image sweep. Durations kept as timestamps (hours, days) are bounded too, so that an expiry
 * stays an exact integer. test/config.test.ts holds every duration key to this.
 */
const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/**
 * Marks a value that may be or hold a secret (a key, a password, a URL with credentials): a
 * config error never echoes it, nor any value whose part of the schema contains one (a string
 * written where [database] or an account belongs is most likely the secret itself).
 */
const SECRET = { secret: true } as const;

const Server = T.Object(
  {
    host: T.String({ default: "0.0.0.0", description: "Address to listen on." }),
    port: T.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
    data_dir: T.String({ default: "./data", description: "Directory holding atelier.db." }),
    public_url: T.Optional(T.String({ description: "External base URL, e.g. https://atelier.example.com (the workbench's same-origin check behind a proxy, and Secure cookies when https)." })),
    max_body_bytes: T.Integer({ minimum: 1024, default: 180 * MiB, description: "Largest accepted request body." }),
    max_inflight_body_bytes: T.Integer({ minimum: 1024, default: 512 * MiB, description: "Total request-body bytes buffered at once across all requests." }),
    max_form_body_bytes: T.Integer({ minimum: 1024, default: 64 * 1024, description: "Largest body on routes outside /v1 (workbench forms), which anyone may call without a key." }),
    body_grace_ms: T.Integer({ minimum: 100, maximum: HOUR_MS, default: 10_000, description: "Time a request body may take before the minimum rate applies." }),
    min_body_bytes_per_s: T.Integer({ minimum: 1, default: 64 * 1024, description: "After the grace period, a body must keep arriving at this average rate or the request ends with 408." }),
    idle_timeout_s: T.Integer({ minimum: 1, maximum: 255, default: 255 }),
    stream_heartbeat_ms: T.Integer({ minimum: 10, maximum: HOUR_MS, default: 15_000, description: "Longest silence on a streamed image or chat answer before a comment line keeps proxies from closing it." }),
    shutdown_grace_ms: T.Integer({ minimum: 0, maximum: DAY_MS, default: 30_000 }),
    builtin_image: T.Boolean({ default: true, description: "Offer the built-in offline renderer as model builtin-image." }),
    builtin_chat: T.Boolean({ default: true, description: "Offer the built-in chat wiring check as model builtin-chat." }),
    builtin_image_price: T.Integer({ minimum: 0, maximum: MAX_MODEL_PRICE, default: 1, description: "Credits one builtin-image request costs (0: free)." }),
    default_image_model: T.Optional(T.String({ description: "Image model used when a request names none." })),
    log_requests: T.Boolean({ default: true }),
    log_format: T.Union([T.Literal("json"), T.Literal("pretty")], {
      default: "json",
      description: "json: one JSON object per line (for a log pipeline); pretty: one readable line per event (for a terminal).",
    }),
  },
  { additionalProperties: false, default: {} },
);

const Limits = T.Object(
  {
    generation_concurrency: T.Integer({ minimum: 1, default: 4 }),
    per_user_concurrency: T.Integer({ minimum: 1, default: 2 }),
    queue_size: T.Integer({ minimum: 0, default: 32 }),
    queue_timeout_ms: T.Integer({ minimum: 0, maximum: HOUR_MS, default: 60_000 }),
    generation_timeout_ms: T.Integer({ minimum: 1, maximum: DAY_MS, default: 300_000 }),
    chat_concurrency: T.Integer({ minimum: 1, default: 16 }),
    async_concurrency: T.Integer({ minimum: 1, default: 2, description: "Async image tasks running at once on this instance (apart from the synchronous requests' slots)." }),
    async_per_user_concurrency: T.Integer({ minimum: 1, default: 1, description: "Async image tasks running at once for one user, across every instance sharing the database." }),
    async_queue_size: T.Integer({ minimum: 1, default: 200, description: "Async image tasks queued or running, server-wide; beyond it 429 task_queue_full." }),
    async_per_user_queue_size: T.Integer({ minimum: 1, default: 20, description: "Async image tasks queued or running for one user." }),
  },
  { additionalProperties: false, default: {} },
);

const Chat = T.Object(
  {
    allow_streaming: T.Boolean({
      default: false,
      description: "Answer chat requests sent with stream: true as server-sent chat.completion.chunk events (for chat UIs); off, they get 400 stream_unsupported.",
    }),
  },
  { additionalProperties: false, default: {} },
);

const Account = T.Object(
  {
    id: T.String({ minLength: 1 }),
    api_key: T.Optional(T.String(SECRET)),
    username: T.Optional(T.String()),
    password: T.Optional(T.String(SECRET)),
    weight: T.Integer({ minimum: 1, default: 1 }),
    max_concurrency: T.Integer({ minimum: 1, default: 2 }),
  },
  { additionalProperties: false },
);

const Upstream = T.Object(
  {
    id: T.String({ minLength: 1 }),
    kind: T.Union([T.Literal("openai"), T.Literal("sdwebui"), T.Literal("comfyui"), T.Literal("fal"), T.Literal("replicate"), T.Literal("bfl"), T.Literal("gemini")]),
    base_url: T.String({ minLength: 1, ...SECRET }),
    timeout_ms: T.Integer({ minimum: 1, maximum: DAY_MS, default: 120_000 }),
    max_attempts: T.Integer({ minimum: 1, default: 3 }),
    deadline_ms: T.Optional(T.Integer({ minimum: 1, maximum: DAY_MS, description: "Overall limit for one request across waiting and all attempts (default: limits.generation_timeout_ms)." })),
    rate_limit_cooldown_max_ms: T.Integer({ minimum: 1, maximum: DAY_MS, default: 60_000, description: "Cap of the 429 cooldown when the upstream sends no retry-after, and of the delay a gemini upstream names in its 429 body (RetryInfo)." }),
    failure_threshold: T.Integer({ minimum: 1, default: 3, description: "Consecutive failures that cool an account down." }),
    failure_cooldown_ms: T.Integer({ minimum: 1, maximum: DAY_MS, default: 5_000, description: "First failure cooldown; doubles per further failure." }),
    failure_cooldown_max_ms: T.Integer({ minimum: 1, maximum: DAY_MS, default: 300_000 }),
    max_download_bytes: T.Integer({ minimum: 1024, default: 64 * MiB, description: "Largest image downloaded from an upstream `url` answer." }),
    download_timeout_ms: T.Integer({ minimum: 1, maximum: HOUR_MS, default: 30_000, description: "Time limit for downloading an upstream `url` answer." }),
    accounts: T.Array(Account, { minItems: 1 }),
  },
  { additionalProperties: false },
);

const Model = T.Object(
  {
    id: T.String({ minLength: 1 }),
    kind: T.Union([T.Literal("image"), T.Literal("chat")]),
    owned_by: T.Optional(T.String()),
    upstream: T.Optional(T.String()),
    upstream_model: T.Optional(T.String()),
    sizes: T.Optional(T.Array(T.String())),
    qualities: T.Optional(T.Array(T.String())),
    price: T.Optional(T.Integer({ minimum: 0, maximum: MAX_MODEL_PRICE, description: "Credits one accepted request costs (image models only; default 1, 0: free). Refunds return what was charged." })),
    params: T.Optional(T.Record(T.String(), T.Unknown(), { description: "Extra engine parameters: sdwebui and queue APIs pass them as input fields (sampler_name, cfg_scale…); comfyui takes its workflow, bindings and output_node here." })),
  },
  { additionalProperties: false },
);

/** Where credits come from, said in every 402 while `[workbench] top_up_message` is empty (its default). */
export const DEFAULT_TOP_UP_MESSAGE = "Ask the administrator of this service for more credits.";

const Workbench = T.Object(
  {
    enabled: T.Boolean({ default: true }),
    registration: T.Union([T.Literal("open"), T.Literal("closed")], { default: "open" }),
    initial_credits: T.Integer({ minimum: 0, default: 10 }),
    min_password_length: T.Integer({ minimum: 8, default: 10 }),
    // At most 400 days: browsers keep no cookie longer.
    session_ttl_hours: T.Integer({ minimum: 1, maximum: 400 * 24, default: 24 * 14 }),
    secure_cookies: T.Union([T.Literal("auto"), T.Literal("always"), T.Literal("never")], { default: "auto" }),
    top_up_message: T.String({
      maxLength: 500,
      default: "",
      description: "The sentence every 402 insufficient_credits answer ends with: where credits come from (e.g. a top-up page URL); empty: ask the administrator.",
    }),
  },
  { additionalProperties: false, default: {} },
);

const Tasks = T.Object(
  {
    retention_hours: T.Integer({
      minimum: 1,
      maximum: 10 * 365 * 24,
      default: 24,
      description: "How long a finished task (async, streamed or idempotent) stays readable with its result; then GET answers 404 task_expired. A task sent with an Idempotency-Key stays at least as long as its key (24 hours), so that a repeat finds it.",
    }),
  },
  { additionalProperties: false, default: {} },
);

const Storage = T.Object(
  {
    kind: T.Union([T.Literal("files"), T.Literal("s3")], {
      default: "files",
      description: "files: the bytes in a folder (dir); s3: in an S3-compatible bucket (bucket, endpoint, region, credentials), which several instances can share.",
    }),
    dir: T.Optional(T.String({ description: "Where generated images are kept (default: data_dir/images), content-addressed in sharded folders." })),
    bucket: T.Optional(T.String({ minLength: 1, description: "kind = \"s3\": the bucket." })),
    endpoint: T.Optional(T.String({ ...SECRET, description: "kind = \"s3\": http(s) address of the S3-compatible service (default: AWS S3 for the region)." })),
    region: T.Optional(T.String({ minLength: 1, description: "kind = \"s3\": the bucket's region (default us-east-1)." })),
    access_key_id: T.Optional(T.String({ minLength: 1, ...SECRET, description: "kind = \"s3\": the access key id (use ${ENV})." })),
    secret_access_key: T.Optional(T.String({ minLength: 1, ...SECRET, description: "kind = \"s3\": the secret access key (use ${ENV}); never logged or shown." })),
    prefix: T.String({ default: "", description: "kind = \"s3\": put in front of every object key, e.g. \"atelier/\"." }),
    timeout_ms: T.Integer({ minimum: 100, maximum: HOUR_MS, default: 10_000, description: "kind = \"s3\": the longest one call to the bucket may take before it counts as failed." }),
    retention_days: T.Integer({ minimum: 0, maximum: 10 * 365, default: 30, description: "Days a generated image is kept; 0 keeps it until max_bytes evicts it." }),
    max_bytes: T.Integer({ minimum: 0, default: 0, description: "Total size of kept images; past it the oldest expire first. 0: no limit." }),
    url_ttl_s: T.Integer({ minimum: 1, maximum: 7 * 86_400, default: 3_600, description: "How long a `response_format: \"url\"` link works (OpenAI's last 60 minutes)." }),
    sweep_interval_s: T.Integer({ minimum: 1, maximum: 7 * 86_400, default: 600, description: "How often expired images are deleted and files and rows are reconciled." }),
  },
  { additionalProperties: false, default: {} },
);

const Database = T.Object(
  {
    busy_wait_ms: T.Integer({
      minimum: 0,
      maximum: HOUR_MS,
      default: 10_000,
      description:
        "How long a request waits (without blocking the server) for another process's write lock on the database before answering 503 database_busy. Records of finished work keep retrying after that.",
    }),
    url: T.Optional(
      T.String({
        ...SECRET,
        pattern: "^postgres(ql)?://",
        description:
          "postgres:// or postgresql:// URL of the PostgreSQL database that holds the store (users, keys, credits, history) for every instance sharing it (also ATELIER_DATABASE_URL, which wins over the file; write a password as ${ENV_VAR}). Unset: SQLite in data_dir.",
      }),
    ),
  },
  { additionalProperties: false, default: {} },
);

const Webhooks = T.Object(
  {
    allow_private_addresses: T.Boolean({
      default: false,
      description: "Let webhooks go to loopback, private, link-local and other non-public addresses (a receiver on the same host or network).",
    }),
    secret_key: T.Optional(
      T.String({ ...SECRET, description: "Base64 of the 32-byte key that encrypts webhook signing secrets at rest (default: data_dir/webhook-secrets.key, created on first use)." }),
    ),
    retry_delays_ms: T.Array(T.Integer({ minimum: 0, maximum: 7 * 24 * 3_600_000 }), {
      maxItems: 30,
      default: [...DEFAULT_RETRY_DELAYS_MS],
      description: "Delay after each failed delivery attempt; one more attempt than entries.",
    }),
    attempt_timeout_ms: T.Integer({ minimum: 100, maximum: 60_000, default: 10_000, description: "Time limit of one delivery attempt." }),
    concurrency: T.Integer({ minimum: 1, maximum: 256, default: 8, description: "Delivery attempts in flight at once." }),
    poll_interval_ms: T.Integer({ minimum: 10, maximum: HOUR_MS, default: 1_000, description: "Longest pause between two looks for due deliveries." }),
    // Kept as an expiry timestamp, never a timer; a week at most, the longest Stripe lets an
    // old secret live after a roll.
    rotation_overlap_s: T.Integer({
      minimum: 0,
      maximum: 7 * 86_400,
      default: 86_400,
      description:
        "After a user rotates their signing secret, how long the previous one stays valid: every delivery attempt until then is signed with both (0: the previous secret stops at once).",
    }),
  },
  { additionalProperties: false, default: {} },
);

const Fetch = T.Object(
  {
    allow_private: T.Boolean({
      default: false,
      description:
        "Let image references given by URL point to loopback, private, link-local and other non-public addresses (images on the same host or LAN). Off, such URLs, names resolving to them and redirects to them are refused.",
    }),
    timeout_ms: T.Integer({
      minimum: 100,
      maximum: 120_000,
      default: 15_000,
      description: "Time limit for fetching one image reference by URL: name lookups, connections, redirects and the body.",
    }),
  },
  { additionalProperties: false, default: {} },
);

const Metrics = T.Object(
  {
    token: T.Optional(
      T.String({
        ...SECRET,
        minLength: 16,
        description: "The bearer token a Prometheus scrape of /metrics must send (write it as \"${ENV_VAR}\"). Without it /metrics answers 404.",
      }),
    ),
    ledger_check_interval_s: T.Integer({
      minimum: 1,
      maximum: 3600,
      default: 60,
      description: "How often the ledger invariant (users whose balance differs from their ledger sum) is recomputed; a scrape that finds it older recomputes it first.",
    }),
  },
  { additionalProperties: false, default: {} },
);

const Redis = T.Object(
  {
    url: T.Optional(
      T.String({
        ...SECRET,
        pattern: "^rediss?://",
        description:
          "redis:// or rediss:// address of a Redis server that holds the image and chat concurrency gates (slots and queue) and the upstream pools' in-flight counts, cooldowns and probes for every instance sharing it (also ATELIER_REDIS_URL). Unset: each process keeps them in memory.",
      }),
    ),
    key_prefix: T.String({ default: "atelier:", description: "Start of every key Atelier writes in Redis (several deployments can share one server)." }),
  },
  { additionalProperties: false, default: {} },
);

const Instance = T.Object(
  {
    id: T.Optional(
      T.String({
        pattern: "^[A-Za-z0-9._:-]{1,64}$",
        description:
          "This instance's name among those sharing one database (letters, digits, . _ : -). A restart under the same id refunds what the previous run left pending at once; unset, each start takes a new random id and a crashed run's requests are refunded when its lease runs out.",
      }),
    ),
    heartbeat_ms: T.Integer({ minimum: 100, maximum: 600_000, default: 5_000, description: "How often the instance records that it is alive and sweeps requests of instances that are not." }),
    lease_ms: T.Integer({
      minimum: 200,
      maximum: 3_600_000,
      default: 30_000,
      description: "How long after its last heartbeat an instance counts as stopped: its pending requests are then refunded by whichever instance sees them first. At least two heartbeats.",
    }),
  },
  { additionalProperties: false, default: {} },
);

export const ConfigSchema = T.Object(
  {
    server: Server,
    limits: Limits,
    chat: Chat,
    database: Database,
    tasks: Tasks,
    storage: Storage,
    upstreams: T.Array(Upstream, { default: [] }),
    models: T.Array(Model, { default: [] }),
    workbench: Workbench,
    webhooks: Webhooks,
    fetch: Fetch,
    metrics: Metrics,
    redis: Redis,
    instance: Instance,
  },
  { additionalProperties: false },
);

export type Config = Static<typeof ConfigSchema>;
export type UpstreamConfig = Static<typeof Upstream>;
export type AccountConfig = Static<typeof Account>;
export type ModelConfig = Static<typeof Model>;

export class ConfigError extends Error {
  override name = "ConfigError";
}

export interface ConfigSources {
  /** Path of the TOML file; absent means embedded defaults only. */
  file?: string;
  env?: Record<string, string | undefined>;
  /** Command-line overrides, applied last. */
  overrides?: { port?: number; host?: string; data_dir?: string };
  /**
   * "resolve" (the default): every `${NAME}` must be set. "defer": an unset `${NAME}` in an
   * upstream account (`upstreams[i].accounts[j].*`, the upstream secrets) stays as written and is
   * listed by unresolvedUpstreamSecrets, for commands that never call an upstream (user, key,
   * credits, openapi); anything that calls upstreams loads with "resolve".
   */
  upstreamSecrets?: "resolve" | "defer";
}

/** The upstream account values left as `${NAME}` by a "defer" load: "upstreams[0].accounts[1].api_key (UP_KEY)". */
const deferredSecrets = new WeakMap<Config, string[]>();

export function unresolvedUpstreamSecrets(config: Config): string[] {
  return deferredSecrets.get(config) ?? [];
}

const UPSTREAM_ACCOUNT_VALUE = /^upstreams\[\d+\]\.accounts\[\d+\]\./;

/**
 * Replaces `${NAME}` in every string with the environment variable, failing on unset names;
 * with `deferred`, an unset name in an upstream account is kept as written and listed there.
 */
function substituteEnv(value: unknown, env: Record<string, string | undefined>, path: string, deferred?: string[]): unknown {
  if (typeof value === "string") {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (whole: string, name: string) => {
      const found = env[name];
      if (found !== undefined) return found;
      if (deferred && UPSTREAM_ACCOUNT_VALUE.test(path)) return deferred.push(`${path} (${name})`), whole;
      throw new ConfigError(`${path}: environment variable ${name} is not set`);
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => substituteEnv(v, env, `${path}[${i}]`, deferred));
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, substituteEnv(v, env, path ? `${path}.${k}` : k, deferred)]),
    );
  }
  return value;
}

function parseIntEnv(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n)) throw new ConfigError(`${name}: expected an integer, got ${JSON.stringify(raw)}`);
  return n;
}

/** TypeBox's message, made specific where it is vague: unknown keys and the allowed values of a choice. */
function describeProblem(error: ValueError): string {
  if (error.type === ValueErrorType.ObjectAdditionalProperties) return "unknown key";
  const choices = (error.schema as { anyOf?: { const?: unknown }[] }).anyOf;
  const got = shownValue(error);
  if (error.type === ValueErrorType.Union && choices?.every((c) => c.const !== undefined)) {
    return `must be one of ${choices.map((c) => JSON.stringify(c.const)).join(", ")}${got}`;
  }
  return `${error.message}${got}`;
}

/**
 * ", got <value>" for the error message, short. Nothing for a value where a secret belongs or
 * whose part of the schema holds one (holdsSecret); a table or an array is named, not shown
 * (it may hold a secret written in the wrong place); credentials in a URL are blanked.
 */
function shownValue(error: ValueError): string {
  if (error.value === undefined) return " (missing)";
  if (holdsSecret(error.schema)) return "";
  if (Array.isArray(error.value)) return ", got an array";
  if (error.value !== null && typeof error.value === "object") return ", got a table";
  // Blanked before it is cut: a cut could leave the password without the "@" that marks it.
  const text = withoutCredentials(JSON.stringify(error.value) ?? String(error.value));
  return `, got ${text.length > 60 ? `${text.slice(0, 57)}...` : text}`;
}

/** Whether the schema is marked SECRET or has a part that is (a table, an array, a choice). */
function holdsSecret(schema: TSchema): boolean {
  if ((schema as { secret?: unknown }).secret === true) return true;
  const parts: unknown[] = [
    ...Object.values((schema.properties as Record<string, TSchema> | undefined) ?? {}),
    ...Object.values((schema.patternProperties as Record<string, TSchema> | undefined) ?? {}),
    ...((schema.anyOf as TSchema[] | undefined) ?? []),
    ...((schema.allOf as TSchema[] | undefined) ?? []),
    schema.items,
    schema.additionalProperties,
  ];
  return parts.some((part) => part !== null && typeof part === "object" && holdsSecret(part as TSchema));
}

/**
 * `scheme://user:password@host` → `scheme://***@host` wherever it occurs in the text. The user
 * part runs to the last "@" before a space or a quote, so an unencoded "@" or "/" in a password
 * does not leave the rest of it behind.
 */
function withoutCredentials(text: string): string {
  return text.replace(/\b([a-z][a-z0-9+.-]*:\/\/)[^\s"'@]*@(?:[^\s"'@]*@)*/gi, "$1***@");
}

export function loadConfig(sources: ConfigSources = {}): Config {
  const env = sources.env ?? process.env;
  let raw: Record<string, unknown> = {};
  const file = sources.file ?? env.ATELIER_CONFIG;
  const deferred: string[] | undefined = sources.upstreamSecrets === "defer" ? [] : undefined;
  if (file) {
    let text: string;
    try {
      text = require("node:fs").readFileSync(file, "utf8");
    } catch (e) {
      throw new ConfigError(`cannot read config file ${file}: ${(e as Error).message}`);
    }
    try {
      raw = Bun.TOML.parse(text) as Record<string, unknown>;
    } catch (e) {
      throw new ConfigError(`${file}: invalid TOML: ${(e as Error).message}`);
    }
    try {
      raw = substituteEnv(raw, env, "", deferred) as Record<string, unknown>;
    } catch (e) {
      throw new ConfigError(`${file}: ${(e as Error).message}`);
    }
  }

  const server = { ...((raw.server as Record<string, unknown> | undefined) ?? {}) };
  const envPort = parseIntEnv("ATELIER_PORT", env.ATELIER_PORT);
  if (envPort !== undefined) server.port = envPort;
  if (env.ATELIER_HOST) server.host = env.ATELIER_HOST;
  if (env.ATELIER_DATA) server.data_dir = env.ATELIER_DATA;
  const o = sources.overrides ?? {};
  if (o.port !== undefined) server.port = o.port;
  if (o.host !== undefined) server.host = o.host;
  if (o.data_dir !== undefined) server.data_dir = o.data_dir;
  raw.server = server;
  if (env.ATELIER_REDIS_URL) raw.redis = { ...((raw.redis as Record<string, unknown> | undefined) ?? {}), url: env.ATELIER_REDIS_URL };
  if (env.ATELIER_DATABASE_URL) raw.database = { ...((raw.database as Record<string, unknown> | undefined) ?? {}), url: env.ATELIER_DATABASE_URL };

  const withDefaults = Value.Default(ConfigSchema, Value.Clone(raw));
  const first = Value.Errors(ConfigSchema, withDefaults).First();
  if (first) {
    const key = pathFromPointer(first.path) ?? "(top level)";
    throw new ConfigError(`${file ?? "configuration"}: ${key}: ${describeProblem(first)}`);
  }
  const config = withDefaults as Config;
  config.server.data_dir = resolve(config.server.data_dir);
  if (config.storage.dir !== undefined) config.storage.dir = resolve(config.storage.dir);
  checkReferences(config);
  checkStorage(config.storage);
  checkBodyBudget(config.server);
  if (config.instance.lease_ms < 2 * config.instance.heartbeat_ms) {
    throw new ConfigError(`instance.lease_ms: must be at least two heartbeats (2 × heartbeat_ms = ${2 * config.instance.heartbeat_ms}), got ${config.instance.lease_ms}`);
  }
  checkComfyModels(config, file);
  if (deferred?.length) deferredSecrets.set(config, deferred);
  return config;
}

/**
 * The in-flight budget must hold the largest body a route accepts: a body larger than the
 * budget is never admitted, so it would get 429 server_busy ("retry shortly") for ever.
 */
function checkBodyBudget(server: Config["server"]): void {
  for (const key of ["max_body_bytes", "max_form_body_bytes"] as const) {
    if (server.max_inflight_body_bytes < server[key]) {
      throw new ConfigError(
        `server.max_inflight_body_bytes: must be at least ${key} (${server[key]}), got ${server.max_inflight_body_bytes} (a body larger than the budget is never admitted: 429 server_busy for ever)`,
      );
    }
  }
}

const S3_KEYS = ["bucket", "endpoint", "region", "access_key_id", "secret_access_key"] as const;

/** [storage]: kind = "s3" needs its bucket and credentials; the other kind's keys are refused rather than ignored. */
function checkStorage(storage: Config["storage"]): void {
  if (storage.kind === "files") {
    const stray = S3_KEYS.find((k) => storage[k] !== undefined) ?? (storage.prefix !== "" ? "prefix" : undefined);
    if (stray) throw new ConfigError(`storage.${stray}: only with kind = "s3" (kind is "files")`);
    return;
  }
  if (storage.dir !== undefined) throw new ConfigError('storage.dir: only with kind = "files" (kind is "s3": the bytes go to the bucket)');
  for (const k of ["bucket", "access_key_id", "secret_access_key"] as const) {
    if (storage[k] === undefined) throw new ConfigError(`storage.${k}: required with kind = "s3"`);
  }
  // The value is not echoed: an address may carry credentials.
  if (storage.endpoint !== undefined && !isHttpUrl(storage.endpoint)) throw new ConfigError("storage.endpoint: must be an absolute http:// or https:// URL");
  if (storage.prefix.startsWith("/") || storage.prefix.split("/").includes("..")) throw new ConfigError('storage.prefix: must not start with "/" or contain ".."');
}

function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return (url.protocol === "http:" || url.protocol === "https:") && url.host !== "";
  } catch {
    return false;
  }
}

/**
 * Not an upstream id: a model's source is the built-in engines or an upstream (a tagged union
 * in core/models, so no id could take the built-in models over), but an upstream called
 * "builtin" would still read as the built-in renderer in every log line and page.
 */
const RESERVED_UPSTREAM_ID = "builtin";

/** Cross-field rules TypeBox cannot express: unique ids and models naming real upstreams, usable URLs. */
function checkReferences(config: Config): void {
  // Not echoed: the URL may carry the database password.
  if (config.database.url !== undefined && !URL.canParse(config.database.url)) {
    throw new ConfigError("database.url: not a valid URL; expected postgres://user:password@host:port/database (percent-encode special characters in the password)");
  }
  const publicUrl = config.server.public_url;
  if (publicUrl !== undefined && !isHttpUrl(publicUrl)) {
    throw new ConfigError(`server.public_url: must be an absolute http:// or https:// URL, got ${withoutCredentials(JSON.stringify(publicUrl))}`);
  }
  const upstreamIds = new Set<string>();
  config.upstreams.forEach((u, i) => {
    // "localhost:7860" parses as a URL with the scheme "localhost:"; say so at start, not on the first request.
    // The value is not echoed: a base URL may carry credentials.
    if (!isHttpUrl(u.base_url)) throw new ConfigError(`upstreams[${i}].base_url: must be an absolute http:// or https:// URL`);
    if (u.id === RESERVED_UPSTREAM_ID) {
      throw new ConfigError(
        `upstreams[${i}].id: ${JSON.stringify(u.id)} is reserved for the built-in engines (builtin-image, builtin-chat); give this upstream another id`,
      );
    }
    if (upstreamIds.has(u.id)) throw new ConfigError(`upstreams[${i}].id: duplicate upstream id ${JSON.stringify(u.id)}`);
    upstreamIds.add(u.id);
    const accountIds = new Set<string>();
    u.accounts.forEach((a, j) => {
      if (accountIds.has(a.id)) throw new ConfigError(`upstreams[${i}].accounts[${j}].id: duplicate account id ${JSON.stringify(a.id)}`);
      accountIds.add(a.id);
    });
  });
  const modelIds = new Set<string>();
  config.models.forEach((m, i) => {
    if (modelIds.has(m.id) || m.id === "builtin-image" || m.id === "builtin-chat") {
      throw new ConfigError(`models[${i}].id: duplicate or reserved model id ${JSON.stringify(m.id)}`);
    }
    modelIds.add(m.id);
    if (m.upstream === RESERVED_UPSTREAM_ID) {
      throw new ConfigError(
        `models[${i}].upstream: "builtin" is not an upstream; the built-in models are builtin-image and builtin-chat ([server] builtin_image, builtin_chat), not [[models]] entries`,
      );
    }
    if (m.upstream !== undefined && !upstreamIds.has(m.upstream)) {
      throw new ConfigError(`models[${i}].upstream: no upstream with id ${JSON.stringify(m.upstream)}`);
    }
    if (m.upstream === undefined) throw new ConfigError(`models[${i}].upstream: required (the id of an [[upstreams]] entry)`);
    // Chat is free: a price there would be shown but never charged, so it is refused instead.
    if (m.kind === "chat" && m.price !== undefined) throw new ConfigError(`models[${i}].price: chat models are free; price applies to image models only`);
    if (m.kind === "chat" && config.upstreams.find((u) => u.id === m.upstream)?.kind === "sdwebui") {
      throw new ConfigError(`models[${i}].kind: upstream ${JSON.stringify(m.upstream)} is a Stable Diffusion WebUI, which serves image models only`);
    }
    const queueKind = config.upstreams.find((u) => u.id === m.upstream)?.kind;
    if (m.kind === "chat" && (queueKind === "fal" || queueKind === "replicate" || queueKind === "bfl")) {
      throw new ConfigError(`models[${i}].kind: upstream ${JSON.stringify(m.upstream)} is a ${queueKind} queue API, which serves image models only`);
    }
    if (m.kind === "chat" && config.upstreams.find((u) => u.id === m.upstream)?.kind === "gemini") {
      throw new ConfigError(`models[${i}].kind: upstream ${JSON.stringify(m.upstream)} is a gemini upstream, which serves image models only`);
    }
  });
  const webhookKey = config.webhooks.secret_key;
  if (webhookKey !== undefined && (!/^[A-Za-z0-9+/]+={0,2}$/.test(webhookKey) || Buffer.from(webhookKey, "base64").length !== 32)) {
    throw new ConfigError("webhooks.secret_key: must be the base64 of 32 random bytes (e.g. `openssl rand -base64 32`)");
  }
  const fallback = config.server.default_image_model;
  if (fallback !== undefined) {
    const isImageModel =
      (fallback === "builtin-image" && config.server.builtin_image) || config.models.some((m) => m.id === fallback && m.kind === "image");
    if (!isImageModel) throw new ConfigError(`server.default_image_model: ${JSON.stringify(fallback)} is not an image model of this configuration`);
  }
}

/**
 * comfyui models: a workflow given as a file path is read (relative to the config file's
 * folder) into params.workflow, and the workflow's placeholders, bindings and output node are
 * checked, so a mistake names the model and the node at startup.
 */
function checkComfyModels(config: Config, file: string | undefined): void {
  const baseDir = file ? dirname(resolve(file)) : process.cwd();
  config.models.forEach((m, i) => {
    if (config.upstreams.find((u) => u.id === m.upstream)?.kind !== "comfyui") return;
    if (m.kind === "chat") throw new ConfigError(`models[${i}].kind: upstream ${JSON.stringify(m.upstream)} is a ComfyUI server, which serves image models only`);
    const where = `models[${i}] (${m.id}): params`;
    try {
      m.params = withWorkflowLoaded(m.params ?? {}, (path) => require("node:fs").readFileSync(resolve(baseDir, path), "utf8"), where);
      comfyModelSettings(m.params, where);
    } catch (e) {
      throw new ConfigError((e as Error).message);
    }
  });
}
