/**
 * Which server instances are alive (a heartbeat row each), and which pending requests belong to
 * an instance that is not: the rows behind core/instances.ts. Portable SQL (store/sql.ts).
 */
import type { SqlClient } from "./sql";

export interface InstanceRow {
  id: string;
  host: string | null;
  started_at: number;
  heartbeat_at: number;
}

export class InstanceStore {
  constructor(private readonly sql: SqlClient) {}

  /**
   * Records this instance as alive now. Returns the heartbeat of a previous row under the same
   * id (a restart with a configured id, or a second instance wrongly sharing it), or null.
   */
  async register(id: string, host: string | null, now: number): Promise<number | null> {
    return this.sql.transaction(async (tx) => {
      const before = await tx.get<{ heartbeat_at: number }>("SELECT heartbeat_at FROM instances WHERE id = ?", [id]);
      await tx.run(
        `INSERT INTO instances (id, host, started_at, heartbeat_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET host = excluded.host, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
        [id, host, now, now],
      );
      return before?.heartbeat_at ?? null;
    });
  }

  /** Moves this instance's heartbeat; recreates its row if an operator deleted it. */
  async heartbeat(id: string, host: string | null, now: number): Promise<void> {
    const { changes } = await this.sql.run("UPDATE instances SET heartbeat_at = ? WHERE id = ?", [now, id]);
    if (changes === 0) {
      await this.sql.run("INSERT INTO instances (id, host, started_at, heartbeat_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING", [id, host, now, now]);
    }
  }

  /** Instances whose heartbeat is within the lease. */
  async live(now: number, leaseMs: number): Promise<InstanceRow[]> {
    return this.sql.all<InstanceRow>("SELECT id, host, started_at, heartbeat_at FROM instances WHERE heartbeat_at >= ? ORDER BY id", [now - leaseMs]);
  }

  /**
   * Pending requests that `owner` was running (a previous run of this instance, under a
   * configured id): nobody else runs them. Queued async tasks are not running anywhere.
   */
  async pendingOwnedBy(owner: string, limit: number): Promise<string[]> {
    const rows = await this.sql.all<{ id: string }>(
      `SELECT r.id FROM requests r
        WHERE r.status = 'pending' AND r.owner = ?
          AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = r.id AND t.status = 'queued')
        ORDER BY r.id LIMIT ?`,
      [owner, limit],
    );
    return rows.map((r) => r.id);
  }

  /**
   * Pending requests whose owner's lease has run out (or whose owner row is gone), other than
   * `self`'s. Requests without an owner (rows from before migration 13) are left to the
   * embedded start-up recovery, which owns every pending row.
   */
  async orphaned(self: string, now: number, leaseMs: number, limit: number): Promise<string[]> {
    const rows = await this.sql.all<{ id: string }>(
      `SELECT r.id FROM requests r LEFT JOIN instances i ON i.id = r.owner
        WHERE r.status = 'pending' AND r.owner IS NOT NULL AND r.owner <> ?
          AND (i.id IS NULL OR i.heartbeat_at < ?)
          AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = r.id AND t.status = 'queued')
        ORDER BY r.id LIMIT ?`,
      [self, now - leaseMs, limit],
    );
    return rows.map((r) => r.id);
  }

  /** Forgets instances dead for longer than `olderThanMs` that own no pending request. */
  async prune(now: number, olderThanMs: number): Promise<number> {
    const { changes } = await this.sql.run(
      `DELETE FROM instances WHERE heartbeat_at < ?
          AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.owner = instances.id AND r.status = 'pending')`,
      [now - olderThanMs],
    );
    return changes;
  }
}
