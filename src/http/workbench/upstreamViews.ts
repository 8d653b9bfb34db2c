/**
 * The upstream pool as the admin page shows it: every configured upstream and account, with
 * live state where the running pool reports it.
 */
import type { Services } from "../../app";
import type { UpstreamView } from "../../workbench/pages/admin";

export function upstreamViews(services: Services): { upstreams: UpstreamView[]; live: boolean } {
  const models = services.catalog.list();
  const upstreams = services.config.upstreams.map((u) => ({
    id: u.id,
    kind: u.kind,
    baseUrl: u.base_url,
    models: models.filter((m) => m.upstream === u.id).map((m) => m.id),
    accounts: u.accounts.map((a) => ({ id: a.id, state: null })),
  }));
  return { upstreams, live: false };
}
