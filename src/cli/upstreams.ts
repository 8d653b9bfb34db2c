/**
 * `atelier upstreams` and `atelier upstreams enable <upstream> <account>`.
 *
 * In-flight counts and cooldowns live in the server process; the server writes them to the
 * database (throttled, at most every 0.5 s, whenever they change), and this command reads
 * that snapshot: the AS OF column says when it was written. Disabled flags are read from
 * the database directly, so they are always current, and `enable` takes effect in a running
 * server within 100 ms (the pool re-reads the flags when another process wrote to the store).
 */
import type { Config } from "../config";
import { formatStatusTable, storedStatus } from "../engines/status";
import type { Store } from "../store";
import { UsageError } from "./args";
import { enableUpstreamAccount as enableAccount } from "../core/upstreamAccounts";

export async function showUpstreams(config: Config, store: Store, now: number, json: boolean): Promise<string[]> {
  const disabled = new Map(await Promise.all(config.upstreams.map(async (u) => [u.id, await store.upstreams.disabledAccounts(u.id)] as const)));
  const status = storedStatus(config, { snapshots: await store.upstreams.loadSnapshots(), disabled }, now);
  return json ? [JSON.stringify({ object: "list", data: status }, null, 2)] : formatStatusTable(status);
}

/** The CLI's words for core's enableUpstreamAccount (a running server re-reads the flag itself). */
export async function enableUpstreamAccount(config: Config, store: Store, upstreamId: string, accountId: string): Promise<string> {
  const result = await enableAccount({ upstreams: config.upstreams, flags: store.upstreams }, upstreamId, accountId);
  if (!result.ok && result.missing === "upstream") {
    throw new UsageError(`no upstream '${upstreamId}' in the configuration (known: ${config.upstreams.map((u) => u.id).join(", ") || "none"})`);
  }
  if (!result.ok) {
    const known = config.upstreams.find((u) => u.id === upstreamId)!.accounts.map((a) => a.id).join(", ");
    throw new UsageError(`upstream '${upstreamId}' has no account '${accountId}' (known: ${known})`);
  }
  return result.wasDisabled ? `enabled ${upstreamId}/${accountId}; a running server uses it from its next request` : `${upstreamId}/${accountId} was not disabled; nothing to do`;
}
