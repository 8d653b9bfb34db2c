/**
 * The upstream pool as the admin page shows it: every configured upstream with the live state of
 * its accounts, from the same source as GET /admin/api/upstreams.
 */
import type { Services } from "../../services";
import { upstreamIdOf } from "../../core/models";
import { liveStatus } from "../../engines/status";
import type { UpstreamView } from "../../workbench/pages/admin";

export async function upstreamViews(services: Services): Promise<UpstreamView[]> {
  const models = services.catalog.list();
  const live = await liveStatus(services.config, services.upstreams, services.clock());
  return services.config.upstreams.map((u) => ({
    id: u.id,
    kind: u.kind,
    baseUrl: withoutCredentials(u.base_url),
    models: models.filter((m) => upstreamIdOf(m) === u.id).map((m) => m.id),
    accounts: live.find((s) => s.id === u.id)?.accounts ?? [],
  }));
}

/** A base URL may carry `user:password@` (or a token in the query); the page shows neither. */
export function withoutCredentials(baseUrl: string): string {
  try {
    const url = new URL(baseUrl);
    url.username = "";
    url.password = "";
    url.search = "";
    return url.toString();
  } catch {
    return "(unparseable URL)";
  }
}
