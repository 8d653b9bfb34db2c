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

export function opsRoutes(deps: { store: Store; redis?: RedisClient | undefined }) {
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
        if (!deps.store.ready()) {
          throw new ApiError(503, "server_error", "The database is unreachable or its schema is not current.", null, "not_ready");
        }
        if (deps.redis && !(await redisAnswers(deps.redis))) {
          throw new ApiError(503, "server_error", "Redis (the shared concurrency gate, [redis] url) is unreachable.", null, "not_ready");
        }
        return { status: "ready" as const };
      },
      {
        response: { 200: t.Object({ status: t.Literal("ready") }), ...errorResponses(503) },
        detail: { tags: ["Operations"], summary: "Readiness", description: "200 when the database answers and all migrations are applied, and, with [redis] url set, Redis answers." },
      },
    );
}
