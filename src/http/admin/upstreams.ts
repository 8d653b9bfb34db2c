/**
 * Admin-only JSON view of the upstream account pools, and re-enabling a disabled account:
 *   GET  /admin/api/upstreams
 *   POST /admin/api/upstreams/:upstream/accounts/:account/enable
 * Admin = an API key (or workbench session) whose user has the admin role. Hidden from the
 * public OpenAPI document: it is an operator's tool, not part of the OpenAI-compatible API.
 */
import { Elysia, t } from "elysia";
import type { Config } from "../../config";
import type { Clock } from "../../core/accounts";
import { liveStatus } from "../../engines/status";
import type { UpstreamPools } from "../../engines/upstreams";
import type { UpstreamStateStore } from "../../store/upstreams";
import { apiAuth, type ApiAuthDeps, type Principal } from "../auth";
import { forbidden, notFound } from "../errors";

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
      ({ principal }) => {
        requireAdmin(principal);
        return { object: "list" as const, data: liveStatus(deps.config, deps.upstreams, deps.clock()) };
      },
      { detail: { hide: true } },
    )
    .post(
      "/upstreams/:upstream/accounts/:account/enable",
      ({ principal, params }) => {
        requireAdmin(principal);
        const upstream = deps.config.upstreams.find((u) => u.id === params.upstream);
        if (!upstream) throw notFound(`No upstream '${params.upstream}' is configured.`, "upstream", "upstream_not_found");
        if (!upstream.accounts.some((a) => a.id === params.account)) {
          throw notFound(`Upstream '${upstream.id}' has no account '${params.account}'.`, "account", "account_not_found");
        }
        const wasDisabled = deps.store.upstreams.enableAccount(upstream.id, params.account);
        deps.upstreams.get(upstream.id)?.refresh();
        return { upstream: upstream.id, account: params.account, enabled: true, was_disabled: wasDisabled };
      },
      { params: t.Object({ upstream: t.String(), account: t.String() }), detail: { hide: true } },
    );
}
