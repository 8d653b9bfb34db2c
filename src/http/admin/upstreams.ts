/**
 * Admin-only JSON view of the upstream account pools, and re-enabling a disabled account:
 *   GET  /admin/api/upstreams
 *   POST /admin/api/upstreams/:upstream/accounts/:account/enable
 * Admin = an API key (or workbench session) whose user has the admin role. Hidden from the
 * public OpenAPI document: it is an operator's tool, not part of the OpenAI-compatible API.
 */
import { Elysia, t } from "elysia";
import type { Config } from "../../config";
import { liveStatus } from "../../engines/status";
import type { UpstreamPools } from "../../engines/upstreams";
import type { UpstreamStateStore } from "../../store/upstreams";
import { apiAuth, type ApiAuthDeps, type Principal } from "../auth";
import { forbidden, notFound } from "../errors";
import { enableUpstreamAccount } from "../../core/upstreamAccounts";
import type { Clock } from "../../core/clock";

export interface AdminUpstreamsDeps {
  config: Config;
  clock: Clock;
  auth: ApiAuthDeps;
  upstreams: UpstreamPools;
  store: { upstreams: UpstreamStateStore };
}

function requireAdmin(principal: Principal): void {
  if (principal.role !== "admin") throw forbidden("This route is for administrators only.", "admin_required");
}

export function adminUpstreamsRoutes(deps: AdminUpstreamsDeps) {
  return new Elysia({ name: "admin.upstreams", prefix: "/admin/api" })
    .use(apiAuth(deps.auth))
    .get(
      "/upstreams",
      async ({ principal }) => {
        requireAdmin(principal);
        return { object: "list" as const, data: await liveStatus(deps.config, deps.upstreams, deps.clock()) };
      },
      { detail: { hide: true } },
    )
    .post(
      "/upstreams/:upstream/accounts/:account/enable",
      async ({ principal, params }) => {
        requireAdmin(principal);
        const result = await enableUpstreamAccount({ upstreams: deps.config.upstreams, flags: deps.store.upstreams, pools: deps.upstreams }, params.upstream, params.account);
        if (!result.ok && result.missing === "upstream") throw notFound(`No upstream '${params.upstream}' is configured.`, "upstream", "upstream_not_found");
        if (!result.ok) throw notFound(`Upstream '${params.upstream}' has no account '${params.account}'.`, "account", "account_not_found");
        return { upstream: params.upstream, account: params.account, enabled: true, was_disabled: result.wasDisabled };
      },
      { params: t.Object({ upstream: t.String(), account: t.String() }), detail: { hide: true } },
    );
}
