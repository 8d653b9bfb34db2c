/**
 * The upstream pool as the admin page shows it: every configured upstream with the live state of
 * its accounts, from the same source as GET /admin/api/upstreams.
 */
import type { Services } from "../../app";
import { liveStatus } from "../../engines/status";
import type { UpstreamView } from "../../workbench/pages/admin";

export function upstreamViews(services: Services): UpstreamView[] {
  const models = services.catalog.list();
  const live = liveStatus(services.config, services.upstreams, services.clock());
  return services.config.upstreams.map((u) => ({
    id: u.id,
    kind: u.kind,
    baseUrl: u.base_url,
    models: models.filter((m) => m.upstream === u.id).map((m) => m.id),
    accounts: live.find((s) => s.id === u.id)?.accounts ?? [],
  }));
}
