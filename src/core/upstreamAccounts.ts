/**
 * Re-enabling an upstream account that its pool disabled (a rejected key, say). The disabled
 * flag lives in storage, so it holds across restarts and other processes see it; a pool in this
 * process is told to re-read it at once.
 */

/** The configured upstreams, as far as this needs them. */
export interface ConfiguredUpstream {
  id: string;
  accounts: readonly { id: string }[];
}

/** The port: the stored disabled flags (store/upstreams.ts implements it). */
export interface DisabledFlags {
  /** Clears the flag; true if the account was disabled. */
  enableAccount(upstreamId: string, accountId: string): Promise<boolean>;
}

/** A running pool (engines/pool.ts); refresh() re-reads the disabled flags. */
export interface RunningPools {
  get(upstreamId: string): { refresh(): Promise<void> } | undefined;
}

export type EnableAccountResult = { ok: true; wasDisabled: boolean } | { ok: false; missing: "upstream" | "account" };

export async function enableUpstreamAccount(
  deps: { upstreams: readonly ConfiguredUpstream[]; flags: DisabledFlags; pools?: RunningPools },
  upstreamId: string,
  accountId: string,
): Promise<EnableAccountResult> {
  const upstream = deps.upstreams.find((u) => u.id === upstreamId);
  if (!upstream) return { ok: false, missing: "upstream" };
  if (!upstream.accounts.some((a) => a.id === accountId)) return { ok: false, missing: "account" };
  const wasDisabled = await deps.flags.enableAccount(upstream.id, accountId);
  await deps.pools?.get(upstream.id)?.refresh();
  return { ok: true, wasDisabled };
}
