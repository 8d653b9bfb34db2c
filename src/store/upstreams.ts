/**
 * Upstream account state that must outlive one process: the disabled flags (so `atelier
 * upstreams enable` in another process reaches the running server) and the pool snapshot the
 * server writes for the CLI. Never holds an account's key. Portable SQL (SQLite and PostgreSQL).
 */
import type { SqlClient } from "./sql";
import { bumpExternal, type Revisions } from "./revisions";
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
    private readonly sql: SqlClient,
    private readonly revisions: Pick<Revisions, "shared">,
  ) {}

  /** The store_revision counter: a disable or enable in any process or instance moves it (both bump it). */
  externalRevision(): Promise<number> {
    return this.revisions.shared();
  }

  async disabledAccounts(upstreamId: string): Promise<Map<string, DisabledInfo>> {
    const rows = await this.sql.all<DisabledAccountRow>("SELECT * FROM upstream_disabled_accounts WHERE upstream_id = ?", [upstreamId]);
    return new Map(rows.map((r) => [r.account_id, { reason: r.reason, at: r.disabled_at }]));
  }

  async disableAccount(upstreamId: string, accountId: string, reason: string, at: number): Promise<void> {
    await this.sql.transaction(async (tx) => {
      await tx.run(
        `INSERT INTO upstream_disabled_accounts (upstream_id, account_id, reason, disabled_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (upstream_id, account_id) DO UPDATE SET reason = excluded.reason, disabled_at = excluded.disabled_at`,
        [upstreamId, accountId, reason, at],
      );
      await bumpExternal(tx);
    });
  }

  /** True when the account was disabled (and now is not). */
  async enableAccount(upstreamId: string, accountId: string): Promise<boolean> {
    return this.sql.transaction(async (tx) => {
      const hit = (await tx.run("DELETE FROM upstream_disabled_accounts WHERE upstream_id = ? AND account_id = ?", [upstreamId, accountId])).changes === 1;
      if (hit) await bumpExternal(tx);
      return hit;
    });
  }

  listDisabled(): Promise<DisabledAccountRow[]> {
    return this.sql.all<DisabledAccountRow>("SELECT * FROM upstream_disabled_accounts ORDER BY upstream_id, account_id");
  }

  async saveSnapshot(upstreamId: string, accounts: AccountSnapshot[], at: number): Promise<void> {
    await this.sql.transaction(async (tx) => {
      for (const a of accounts) {
        await tx.run(
          `INSERT INTO upstream_pool_snapshot (upstream_id, account_id, state_json, updated_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (upstream_id, account_id) DO UPDATE SET state_json = excluded.state_json, updated_at = excluded.updated_at`,
          [upstreamId, a.accountId, JSON.stringify(a), at],
        );
      }
    });
  }

  /** Snapshots keyed "upstream/account". */
  async loadSnapshots(): Promise<Map<string, StoredSnapshot>> {
    const rows = await this.sql.all<{ upstream_id: string; account_id: string; state_json: string; updated_at: number }>("SELECT * FROM upstream_pool_snapshot");
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
