/**
 * `atelier upstreams` and `atelier upstreams enable <upstream> <account>`.
 *
 * In-flight counts and cooldowns live in the server process; the server writes them to the
 * database (throttled, at most every 0.5 s, whenever they change), and this command reads
 * that snapshot: the AS OF column says when it was written. Disabled flags are read from
 * the database directly, so they are always current, and `enable` takes effect in a running
 * server on its next request (the pool re-reads the flags on every pick).
 */
import type { Config } from "../config";
import { formatStatusTable, storedStatus } from "../engines/status";
import type { Store } from "../store";
import { UsageError } from "./args";

export function showUpstreams(config: Config, store: Store, now: number, json: boolean): string[] {
  const status = storedStatus(
    config,
    { snapshots: store.upstreams.loadSnapshots(), disabled: (id) => store.upstreams.disabledAccounts(id) },
    now,
  );
  return json ? [JSON.stringify({ object: "list", data: status }, null, 2)] : formatStatusTable(status);
}

export function enableUpstreamAccount(config: Config, store: Store, upstreamId: string, accountId: string): string {
  const upstream = config.upstreams.find((u) => u.id === upstreamId);
  if (!upstream) throw new UsageError(`no upstream '${upstreamId}' in the configuration (known: ${config.upstreams.map((u) => u.id).join(", ") || "none"})`);
  if (!upstream.accounts.some((a) => a.id === accountId)) {
    throw new UsageError(`upstream '${upstreamId}' has no account '${accountId}' (known: ${upstream.accounts.map((a) => a.id).join(", ")})`);
  }
  return store.upstreams.enableAccount(upstreamId, accountId)
    ? `enabled ${upstreamId}/${accountId}; a running server uses it from its next request`
    : `${upstreamId}/${accountId} was not disabled; nothing to do`;
}
