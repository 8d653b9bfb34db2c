/**
 * Upstream account state that must outlive one process: the disabled flags (so `atelier
 * upstreams enable` in another process reaches the running server) and the pool snapshot the
 * server writes for the CLI. Never holds an account's key.
 */
import type { Db } from "./database";
import { Revisions } from "./revisions";
import type { AccountSnapshot, DisabledInfo, PoolStateStore } from "../core/store";

export interface DisabledAccountRow {
  upstream_id: string;
  account_id: string;
  reason: string;
  disabled_at: number;
}

export interface StoredSnapshot {
  snapshot: AccountSnapshot;
  updatedAt: number;
}

export class UpstreamStateStore implements PoolStateStore {
  constructor(
    private readonly db: Db,
    private readonly revisions: Revisions = new Revisions(db),
  ) {}

  externalRevision(): number {
    return this.revisions.external();
  }

  disabledAccounts(upstreamId: string): Map<string, DisabledInfo> {
    const rows = this.db
      .query<DisabledAccountRow, [string]>("SELECT * FROM upstream_disabled_accounts WHERE upstream_id = ?")
      .all(upstreamId);
    return new Map(rows.map((r) => [r.account_id, { reason: r.reason, at: r.disabled_at }]));
  }

  disableAccount(upstreamId: string, accountId: string, reason: string, at: number): void {
    this.db
      .query(
        `INSERT INTO upstream_disabled_accounts (upstream_id, account_id, reason, disabled_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (upstream_id, account_id) DO UPDATE SET reason = excluded.reason, disabled_at = excluded.disabled_at`,
      )
      .run(upstreamId, accountId, reason, at);
  }

  /** True when the account was disabled (and now is not). */
  enableAccount(upstreamId: string, accountId: string): boolean {
    return this.db.query("DELETE FROM upstream_disabled_accounts WHERE upstream_id = ? AND account_id = ?").run(upstreamId, accountId).changes === 1;
  }

  listDisabled(): DisabledAccountRow[] {
    return this.db.query<DisabledAccountRow, []>("SELECT * FROM upstream_disabled_accounts ORDER BY upstream_id, account_id").all();
  }

  saveSnapshot(upstreamId: string, accounts: AccountSnapshot[], at: number): void {
    const upsert = this.db.query(
      `INSERT INTO upstream_pool_snapshot (upstream_id, account_id, state_json, updated_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (upstream_id, account_id) DO UPDATE SET state_json = excluded.state_json, updated_at = excluded.updated_at`,
    );
    this.db.transaction(() => {
      for (const a of accounts) upsert.run(upstreamId, a.accountId, JSON.stringify(a), at);
    })();
  }

  /** Snapshots keyed "upstream/account". */
  loadSnapshots(): Map<string, StoredSnapshot> {
    const rows = this.db
      .query<{ upstream_id: string; account_id: string; state_json: string; updated_at: number }, []>("SELECT * FROM upstream_pool_snapshot")
      .all();
    const out = new Map<string, StoredSnapshot>();
    for (const r of rows) {
      try {
        out.set(`${r.upstream_id}/${r.account_id}`, { snapshot: JSON.parse(r.state_json) as AccountSnapshot, updatedAt: r.updated_at });
      } catch {
        // A row from an incompatible version: ignore it rather than fail the CLI.
      }
    }
    return out;
  }
}
