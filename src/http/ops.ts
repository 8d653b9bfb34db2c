/** Liveness and readiness for orchestrators and the Docker HEALTHCHECK. */
import { Elysia, t } from "elysia";
import type { Store } from "../store";
import { ApiError } from "./errors";
import { errorResponses, sharedModels } from "./shared";
import { buildCommit, VERSION } from "../version";

export function opsRoutes(deps: { store: Store }) {
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
      () => {
        if (!deps.store.ready()) {
          throw new ApiError(503, "server_error", "The database is unreachable or its schema is not current.", null, "not_ready");
        }
        return { status: "ready" as const };
      },
      {
        response: { 200: t.Object({ status: t.Literal("ready") }), ...errorResponses(503) },
        detail: { tags: ["Operations"], summary: "Readiness", description: "200 when the database answers and all migrations are applied." },
      },
    );
}
