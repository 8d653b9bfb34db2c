/**
 * Image tasks and Idempotency-Keys. A task's money moves in store/credits.ts (its charge, with
 * the task row and the key claim, in one transaction; its refund with the task's final state);
 * this holds the rest of its life: reading, queueing, starting, expiring.
 */
import type { Db } from "./database";
import type { IdempotencyRow, TaskInput, TaskRow, TaskStore } from "../core/store";

export class SqliteTaskStore implements TaskStore {
  constructor(private readonly db: Db) {}

  get(id: string): TaskRow | null {
    return this.db.query<TaskRow, [string]>("SELECT * FROM tasks WHERE id = ?").get(id);
  }

  list(userId: number, opts: { status?: TaskRow["status"]; limit: number; after?: string }): TaskRow[] {
    const where = ["user_id = ?", "expired = 0"];
    const args: (string | number)[] = [userId];
    if (opts.status) {
      where.push("status = ?");
      args.push(opts.status);
    }
    if (opts.after) {
      const cursor = this.get(opts.after);
      if (!cursor || cursor.user_id !== userId) return [];
      where.push("(created_at < ? OR (created_at = ? AND id < ?))");
      args.push(cursor.created_at, cursor.created_at, cursor.id);
    }
    args.push(opts.limit);
    return this.db
      .query<TaskRow, (string | number)[]>(`SELECT * FROM tasks WHERE ${where.join(" AND ")} ORDER BY created_at DESC, id DESC LIMIT ?`)
      .all(...args);
  }

  inputs(id: string): TaskInput[] {
    return this.db
      .query<TaskInput & { bytes: Uint8Array }, [string]>("SELECT role, param, mime, width, height, bytes FROM task_inputs WHERE task_id = ? ORDER BY position")
      .all(id)
      .map((r) => ({ ...r, bytes: new Uint8Array(r.bytes) }));
  }

  queued(): TaskRow[] {
    return this.db.query<TaskRow, []>("SELECT * FROM tasks WHERE status = 'queued' ORDER BY created_at, id").all();
  }

  queuePosition(id: string): number {
    const task = this.get(id);
    if (!task || task.status !== "queued") return 0;
    const ahead = this.db
      .query<{ n: number }, [number, number, string]>(
        "SELECT COUNT(*) AS n FROM tasks WHERE status = 'queued' AND (created_at < ? OR (created_at = ? AND id < ?))",
      )
      .get(task.created_at, task.created_at, task.id)!.n;
    return ahead + 1;
  }

  asyncLoad(userId: number): { all: number; user: number } {
    const row = this.db
      .query<{ all_n: number; user_n: number | null }, [number]>(
        "SELECT COUNT(*) AS all_n, SUM(user_id = ?) AS user_n FROM tasks WHERE mode = 'async' AND status IN ('queued', 'running')",
      )
      .get(userId)!;
    return { all: row.all_n, user: row.user_n ?? 0 };
  }

  start(id: string, now: number): boolean {
    return this.db.query("UPDATE tasks SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'").run(now, id).changes === 1;
  }

  idempotency(userId: number, key: string, now: number): IdempotencyRow | null {
    return this.db
      .query<IdempotencyRow, [number, string, number]>("SELECT * FROM idempotency_keys WHERE user_id = ? AND key = ? AND expires_at > ?")
      .get(userId, key, now);
  }

  expire(now: number): number {
    return this.db.transaction(() => {
      this.db.query("DELETE FROM idempotency_keys WHERE expires_at <= ?").run(now);
      return this.db
        .query("UPDATE tasks SET expired = 1, result = NULL, error = NULL, job = NULL WHERE expired = 0 AND expires_at IS NOT NULL AND expires_at <= ?")
        .run(now).changes;
    }).immediate();
  }
}
