/**
 * The pool state as people see it (`atelier upstreams`, GET /admin/api/upstreams): one shape,
 * built either from the live pools (inside the server) or from what the server last wrote to
 * the database (the CLI, in another process). Never contains a key or a password: the stored
 * texts are redacted again on the way out, since an older version may have written them.
 */
import type { Config } from "../config";
import type { AccountFailure, AccountHealth, AccountSnapshot, DisabledInfo } from "../core/store";
import { SecretRedactor } from "./redact";
import type { UpstreamPools } from "./upstreams";

export interface AccountStatus {
  id: string;
  weight: number;
  max_concurrency: number;
  in_flight: number;
  state: AccountHealth;
  cooling_until: string | null;
  disabled_reason: string | null;
  disabled_at: string | null;
  consecutive_failures: number;
  recent_failures: { at: string; kind: AccountFailure["kind"]; message: string }[];
  /** When this state was observed: now for the live view, the server's last write for the CLI. */
  as_of: string | null;
}

export interface UpstreamStatus {
  id: string;
  kind: Config["upstreams"][number]["kind"];
  accounts: AccountStatus[];
}

const iso = (ms: number | null | undefined) => (ms === null || ms === undefined ? null : new Date(ms).toISOString());

function fromSnapshot(s: AccountSnapshot, asOf: number | null, redactor: SecretRedactor): AccountStatus {
  return {
    id: s.accountId,
    weight: s.weight,
    max_concurrency: s.capacity,
    in_flight: s.inFlight,
    state: s.state,
    cooling_until: iso(s.coolingUntil),
    disabled_reason: s.disabledReason === null ? null : redactor.message(s.disabledReason),
    disabled_at: iso(s.disabledAt),
    consecutive_failures: s.consecutiveFailures,
    recent_failures: s.recentFailures.map((f) => ({ at: iso(f.at)!, kind: f.kind, message: redactor.message(f.message) })),
    as_of: iso(asOf),
  };
}

/** Inside the server: the pools' own state, after re-reading the disabled flags. */
export async function liveStatus(config: Config, pools: UpstreamPools, now: number): Promise<UpstreamStatus[]> {
  const redactor = SecretRedactor.forUpstreams(config.upstreams);
  await Promise.all(config.upstreams.map((u) => pools.get(u.id)?.refresh()));
  return config.upstreams.map((u) => {
    const snaps = pools.get(u.id)?.snapshot() ?? [];
    return { id: u.id, kind: u.kind, accounts: snaps.map((s) => fromSnapshot(s, now, redactor)) };
  });
}

/**
 * In another process: the configured accounts, the disabled flags (authoritative, from the
 * database) and the running server's last snapshot. Cooldowns that have since expired show
 * as healthy; an account the server never reported shows as healthy and idle.
 */
export function storedStatus(
  config: Config,
  stored: { snapshots: Map<string, { snapshot: AccountSnapshot; updatedAt: number }>; disabled: ReadonlyMap<string, Map<string, DisabledInfo>> },
  now: number,
): UpstreamStatus[] {
  const redactor = SecretRedactor.forUpstreams(config.upstreams);
  return config.upstreams.map((u) => {
    const disabled = stored.disabled.get(u.id) ?? new Map<string, DisabledInfo>();
    return {
      id: u.id,
      kind: u.kind,
      accounts: u.accounts.map((a) => {
        const found = stored.snapshots.get(`${u.id}/${a.id}`);
        const snap: AccountSnapshot = found?.snapshot ?? {
          upstreamId: u.id,
          accountId: a.id,
          weight: a.weight,
          capacity: a.max_concurrency,
          inFlight: 0,
          state: "healthy",
          coolingUntil: null,
          disabledReason: null,
          disabledAt: null,
          consecutiveFailures: 0,
          recentFailures: [],
        };
        const off = disabled.get(a.id);
        const cooling = snap.coolingUntil !== null && snap.coolingUntil > now;
        const state: AccountHealth = off ? "disabled" : cooling ? "cooling" : snap.state === "probing" || (snap.state === "cooling" && !cooling && snap.consecutiveFailures > 0) ? "probing" : "healthy";
        return fromSnapshot(
          {
            ...snap,
            weight: a.weight,
            capacity: a.max_concurrency,
            state,
            coolingUntil: cooling ? snap.coolingUntil : null,
            disabledReason: off?.reason ?? null,
            disabledAt: off?.at ?? null,
          },
          found?.updatedAt ?? null,
          redactor,
        );
      }),
    };
  });
}

/** The table `atelier upstreams` prints. */
export function formatStatusTable(status: UpstreamStatus[]): string[] {
  const lines = [["UPSTREAM", "ACCOUNT", "IN-FLIGHT", "CAPACITY", "WEIGHT", "STATE", "RECENT FAILURES", "AS OF"].join("\t")];
  for (const u of status) {
    for (const a of u.accounts) {
      const state =
        a.state === "cooling" ? `cooling until ${a.cooling_until}` : a.state === "disabled" ? `disabled (${a.disabled_reason ?? "by an admin"})` : a.state;
      const last = a.recent_failures.at(-1);
      const failures = a.recent_failures.length === 0 ? "-" : `${a.recent_failures.length} (last ${last!.kind} at ${last!.at}: ${last!.message.slice(0, 80)})`;
      lines.push([u.id, a.id, a.in_flight, a.max_concurrency, a.weight, state, failures, a.as_of ?? "never reported"].join("\t"));
    }
  }
  if (status.length === 0) lines.push("(no [[upstreams]] configured)");
  return lines;
}
