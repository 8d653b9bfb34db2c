/**
 * Image tasks and Idempotency-Keys. A task's money moves in store/credits.ts (its charge, with
 * the task row and the key claim, in one transaction; its refund with the task's final state);
 * this holds the rest of its life: reading, queueing, starting, expiring.
 */
import type { SqlClient, SqlValue } from "./sql";
import type { IdempotencyRow, TaskInput, TaskRow, TaskStore } from "../core/store";
import { newInstanceId } from "./instanceId";

/** Queued and running async tasks, server-wide and for one user (the one parameter). */
export const ASYNC_LOAD_SQL = `SELECT CAST(COUNT(*) AS BIGINT) AS all_n, CAST(SUM(CASE WHEN user_id = ? THEN 1 ELSE 0 END) AS BIGINT) AS user_n
  FROM tasks WHERE mode = 'async' AND status IN ('queued', 'running')`;

/**
 * A finished task's expires_at, for the statements that end a task (two parameters, both the
 * retention's end): a keyed task is kept at least until its key expires (keep_until), so that a
 * replay of the key finds it however short the retention.
 */
export const TASK_EXPIRES_AT_SQL = "CASE WHEN keep_until > ? THEN keep_until ELSE ? END";

export interface AsyncLoadRow {
  all_n: number;
  user_n: number | null;
}

export function asyncLoadOf(row: AsyncLoadRow | null): { all: number; user: number } {
  return { all: row?.all_n ?? 0, user: row?.user_n ?? 0 };
}

export class TaskRecords implements TaskStore {
  constructor(
    private readonly sql: SqlClient,
    /** The instance that runs what it claims (the request row records it, core/instances). */
    private readonly owner: string = newInstanceId(),
  ) {}

  get(id: string): Promise<TaskRow | null> {
    return this.sql.get<TaskRow>("SELECT * FROM tasks WHERE id = ?", [id]);
  }

  async list(userId: number, opts: { status?: TaskRow["status"]; limit: number; after?: string }): Promise<TaskRow[]> {
    const where = ["user_id = ?", "expired = 0"];
    const args: SqlValue[] = [userId];
    if (opts.status) {
      where.push("status = ?");
      args.push(opts.status);
    }
    if (opts.after) {
      const cursor = await this.get(opts.after);
      if (!cursor || cursor.user_id !== userId) return [];
      // Written so that the index's created_at serves it as a range (with the OR alone, every page read the user's tasks from the newest down).
      where.push("created_at <= ? AND (created_at < ? OR id < ?)");
      args.push(cursor.created_at, cursor.created_at, cursor.id);
    }
    args.push(opts.limit);
    return this.sql.all<TaskRow>(`SELECT * FROM tasks WHERE ${where.join(" AND ")} ORDER BY created_at DESC, id DESC LIMIT ?`, args);
  }

  async inputs(id: string): Promise<TaskInput[]> {
    const rows = await this.sql.all<TaskInput>("SELECT role, param, mime, width, height, bytes FROM task_inputs WHERE task_id = ? ORDER BY position", [id]);
    return rows.map((r) => ({ ...r, bytes: new Uint8Array(r.bytes) }));
  }

  queued(): Promise<TaskRow[]> {
    return this.sql.all<TaskRow>("SELECT * FROM tasks WHERE status = 'queued' ORDER BY created_at, id");
  }

  async queuePosition(id: string): Promise<number> {
    const task = await this.get(id);
    if (!task || task.status !== "queued") return 0;
    const ahead = await this.sql.get<{ n: number }>(
      "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM tasks WHERE status = 'queued' AND (created_at < ? OR (created_at = ? AND id < ?))",
      [task.created_at, task.created_at, task.id],
    );
    return (ahead?.n ?? 0) + 1;
  }

  async asyncLoad(userId: number): Promise<{ all: number; user: number }> {
    return asyncLoadOf(await this.sql.get<AsyncLoadRow>(ASYNC_LOAD_SQL, [userId]));
  }

  /**
   * Claims a queued task for this instance: queued → running, and its request row records the
   * owner, in one transaction. False when it was no longer queued, or when its user already has
   * `perUserLimit` async tasks running anywhere: the per-user bound holds across the instances
   * sharing the store (each instance alone sees only its own). On PostgreSQL the user's row is
   * locked first, so two instances starting that user's tasks count in turn (a running count
   * read beside another's uncommitted start would let both pass), then the request's row and
   * the task's; every lock is taken SKIP LOCKED, and a row held elsewhere (another instance's
   * start, a charge or refund of that user, a cancel of this task) makes the claim false at
   * once, to be tried again at the next pass: a claim never waits, so it can neither stall the
   * runner behind a long transaction nor deadlock with a refund (which locks the request's
   * row, then the task's, then the user's). On SQLite the write lock serialises it all.
   */
  async start(id: string, now: number, userId: number, perUserLimit: number): Promise<boolean> {
    const postgres = this.sql.dialect === "postgres";
    return this.sql.transaction(async (tx) => {
      if (postgres) {
        // NO KEY UPDATE: it still excludes a charge's (its UPDATE of the balance) and another
        // claim's, but not the KEY SHARE that an insert referencing the user takes (a chat row
        // of theirs being written), which FOR UPDATE would have made every claim skip.
        if (!(await tx.get("SELECT id FROM users WHERE id = ? FOR NO KEY UPDATE SKIP LOCKED", [userId]))) return false;
        if (!(await tx.get("SELECT id FROM requests WHERE id = ? AND status = 'pending' FOR UPDATE SKIP LOCKED", [id]))) return false;
      }
      const claimed = await tx.run(
        `UPDATE tasks SET status = 'running', started_at = ?
          WHERE id = (SELECT id FROM tasks WHERE id = ? AND status = 'queued'${postgres ? " FOR UPDATE SKIP LOCKED" : ""}) AND status = 'queued'
            AND (SELECT COUNT(*) FROM tasks WHERE status = 'running' AND mode = 'async' AND user_id = ?) < ?`,
        [now, id, userId, perUserLimit],
      );
      if (claimed.changes !== 1) return false;
      await tx.run("UPDATE requests SET owner = ? WHERE id = ?", [this.owner, id]);
      return true;
    });
  }

  /** The first request's time is kept: a repeated cancel changes nothing. */
  async requestCancel(id: string, now: number): Promise<boolean> {
    const asked = await this.sql.run("UPDATE tasks SET cancel_requested_at = COALESCE(cancel_requested_at, ?) WHERE id = ? AND status = 'running'", [now, id]);
    return asked.changes === 1;
  }

  async toAbort(ids: string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const rows = await this.sql.all<{ id: string }>(
      `SELECT id FROM tasks WHERE id IN (${ids.map(() => "?").join(", ")}) AND (cancel_requested_at IS NOT NULL OR status <> 'running')`,
      ids,
    );
    return rows.map((r) => r.id);
  }

  idempotency(userId: number, key: string, now: number): Promise<IdempotencyRow | null> {
    return this.sql.get<IdempotencyRow>("SELECT * FROM idempotency_keys WHERE user_id = ? AND key = ? AND expires_at > ?", [userId, key, now]);
  }

  async expire(now: number): Promise<number> {
    return this.sql.transaction(async (tx) => {
      await tx.run("DELETE FROM idempotency_keys WHERE expires_at <= ?", [now]);
      const expired = await tx.run(
        "UPDATE tasks SET expired = 1, result = NULL, error = NULL, job = NULL WHERE expired = 0 AND expires_at IS NOT NULL AND expires_at <= ?",
        [now],
      );
      return expired.changes;
    });
  }
}
