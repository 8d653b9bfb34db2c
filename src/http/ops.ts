/** Liveness and readiness for orchestrators and the Docker HEALTHCHECK. */
import { Elysia, t } from "elysia";
import type { RedisClient } from "bun";
import type { Store } from "../store";
import { ApiError } from "./errors";
import { errorResponses, sharedModels } from "./shared";
import { buildCommit, VERSION } from "../version";

/** Longest wait for Redis's PING answer before /readyz calls it unreachable. */
const REDIS_PING_TIMEOUT_MS = 1_000;

/** True when Redis answers PING in time. */
async function redisAnswers(redis: RedisClient): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), REDIS_PING_TIMEOUT_MS)));
  try {
    return await Promise.race([redis.send("PING", []).then((r: unknown) => r === "PONG"), late]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/** Longest wait for the database's answer before /readyz calls it unreachable. */
const STORE_TIMEOUT_MS = 2_000;

/** True when the database answers in time and its schema is current. */
async function storeAnswers(store: Store): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), STORE_TIMEOUT_MS)));
  try {
    return await Promise.race([store.ready(), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Longest wait for the image bucket's answer before /readyz calls it unreachable. */
const STORAGE_PROBE_TIMEOUT_MS = 2_000;

/** True when the image bucket answers a one-key listing in time with the configured credentials. */
async function storageAnswers(probe: (timeoutMs: number) => Promise<void>): Promise<boolean> {
  try {
    await probe(STORAGE_PROBE_TIMEOUT_MS);
    return true;
  } catch {
    return false;
  }
}

export function opsRoutes(deps: {
  store: Store;
  redis?: RedisClient | undefined;
  imageStorageProbe?: ((timeoutMs: number) => Promise<void>) | undefined;
  /** This instance's heartbeat: unready once it could not be written for a whole lease (others may be refunding its work). */
  liveness?: { healthy(): boolean } | undefined;
}) {
  return new Elysia({ name: "ops" })
    .use(sharedModels)
    .get("/healthz", () => ({ status: "ok" as const, version: VERSION, commit: buildCommit() }), {
      response: {
        200: t.Object({
          status: t.Literal("ok"),
          version: t.String({ description: "The Atelier version (package.json), e.g. `0.1.0`." }),
          commit: t.String({ description: "The commit the binary was built from (short hash), or `unknown`." }),
        }),
      },
      detail: { tags: ["Operations"], summary: "Liveness", description: "Answers 200 while the process is serving HTTP, with the version and build commit." },
    })
    .get(
      "/readyz",
      async () => {
        if (!(await storeAnswers(deps.store))) {
          throw new ApiError(503, "server_error", "The database is unreachable or its schema is not current.", null, "not_ready");
        }
        if (deps.liveness && !deps.liveness.healthy()) {
          throw new ApiError(503, "server_error", "This instance could not record its heartbeat in the database for a whole lease.", null, "not_ready");
        }
        if (deps.redis && !(await redisAnswers(deps.redis))) {
          throw new ApiError(503, "server_error", "Redis (the shared concurrency gate, [redis] url) is unreachable.", null, "not_ready");
        }
        // The image bucket is reported, not required: without it images are still delivered
        // inline (only keeping them and their links fail), so taking every instance out of
        // the load balancer would turn a degraded service into no service.
        if (deps.imageStorageProbe) return { status: "ready" as const, storage: (await storageAnswers(deps.imageStorageProbe)) ? ("ok" as const) : ("unreachable" as const) };
        return { status: "ready" as const };
      },
      {
        response: {
          200: t.Object({
            status: t.Literal("ready"),
            storage: t.Optional(
              t.Union([t.Literal("ok"), t.Literal("unreachable")], {
                description: "With [storage] kind = \"s3\" only: whether the image bucket answers with the configured credentials. Unreachable does not make the service unready: images are then delivered inline, without a kept copy or link.",
              }),
            ),
          }),
          ...errorResponses(503),
        },
        detail: {
          tags: ["Operations"],
          summary: "Readiness",
          description: "200 when the database answers and all migrations are applied, and, with [redis] url set, Redis answers. With [storage] kind = \"s3\", `storage` reports the image bucket.",
        },
      },
    );
}
