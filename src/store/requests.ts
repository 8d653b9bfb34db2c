import type { Db } from "./database";
import type { ChatRecord, RequestLog, TraceFields } from "../core/store";

export interface RequestRow {
  id: string;
  user_id: number;
  key_id: number | null;
  kind: "image" | "chat";
  endpoint: string;
  model: string;
  status: "pending" | "succeeded" | "failed" | "interrupted";
  credits_charged: number;
  credits_refunded: number;
  queue_ms: number | null;
  generation_ms: number | null;
  error_code: string | null;
  error_message: string | null;
  prompt: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  upstream_id: string | null;
  account_id: string | null;
  attempts: number | null;
  upstream_latency_ms: number | null;
  created_at: number;
  finished_at: number | null;
}

export interface RequestFilter {
  userId?: number;
  kind?: RequestRow["kind"];
  status?: RequestRow["status"];
  model?: string;
  limit?: number;
  offset?: number;
}

export class RequestStore implements RequestLog {
  constructor(private readonly db: Db) {}

  /** Requests charged and not yet finished (indexed by status). */
  pendingCount(): number {
    return this.db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM requests WHERE status = 'pending'").get()?.n ?? 0;
  }

  get(id: string): RequestRow | null {
    return this.db.query<RequestRow, [string]>("SELECT * FROM requests WHERE id = ?").get(id);
  }

  /** A charged image request that succeeded: the charge stands. */
  markSucceeded(id: string, t: { queueMs: number; generationMs: number; task?: { result: string; expiresAt: number } } & TraceFields, now: number): boolean {
    return this.db.transaction(() => {
      const changed = this.db
        .query(
          `UPDATE requests SET status = 'succeeded', queue_ms = ?, generation_ms = ?, upstream_id = ?, account_id = ?,
                  attempts = ?, upstream_latency_ms = ?, finished_at = ? WHERE id = ? AND status = 'pending'`,
        )
        .run(t.queueMs, t.generationMs, t.upstreamId ?? null, t.accountId ?? null, t.attempts ?? null, t.upstreamLatencyMs ?? null, now, id).changes === 1;
      if (changed && t.task) {
        this.db
          .query("UPDATE tasks SET status = 'succeeded', result = ?, finished_at = ?, expires_at = ? WHERE id = ? AND status IN ('queued', 'running')")
          .run(t.task.result, now, t.task.expiresAt, id);
      }
      if (changed) this.db.query("DELETE FROM task_inputs WHERE task_id = ?").run(id);
      return changed;
    }).immediate();
  }


  /** Upstream details for a request regardless of outcome (a failure still shows what was tried). */
  recordTrace(id: string, t: TraceFields): void {
    this.db
      .query("UPDATE requests SET upstream_id = ?, account_id = ?, attempts = ?, upstream_latency_ms = ? WHERE id = ?")
      .run(t.upstreamId ?? null, t.accountId ?? null, t.attempts ?? null, t.upstreamLatencyMs ?? null, id);
  }

  /** Chat is free: one finished row, no ledger entry. */
  recordChat(
    r: ChatRecord,
    now: number,
  ): void {
    this.db
      .query(
        `INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, prompt, prompt_tokens, completion_tokens,
                               generation_ms, queue_ms, error_code, error_message, upstream_id, account_id, attempts,
                               upstream_latency_ms, created_at, finished_at)
         VALUES (?, ?, ?, 'chat', '/v1/chat/completions', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        r.id, r.userId, r.keyId, r.model, r.status, r.prompt ?? null, r.promptTokens ?? null, r.completionTokens ?? null,
        r.generationMs ?? null, r.queueMs ?? null, r.errorCode ?? null, r.errorMessage ?? null, r.upstreamId ?? null,
        r.accountId ?? null, r.attempts ?? null, r.upstreamLatencyMs ?? null, now - (r.generationMs ?? 0), now,
      );
  }

  list(f: RequestFilter = {}): RequestRow[] {
    const { sql, args } = whereClause(f);
    return this.db
      .query<RequestRow, (string | number)[]>(`SELECT * FROM requests ${sql} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`)
      .all(...args, f.limit ?? 50, f.offset ?? 0);
  }

  count(f: RequestFilter = {}): number {
    const { sql, args } = whereClause(f);
    return this.db.query<{ n: number }, (string | number)[]>(`SELECT COUNT(*) AS n FROM requests ${sql}`).get(...args)?.n ?? 0;
  }
}

function whereClause(f: RequestFilter): { sql: string; args: (string | number)[] } {
  const where: string[] = [];
  const args: (string | number)[] = [];
  if (f.userId !== undefined) { where.push("user_id = ?"); args.push(f.userId); }
  if (f.kind) { where.push("kind = ?"); args.push(f.kind); }
  if (f.status) { where.push("status = ?"); args.push(f.status); }
  if (f.model) { where.push("model = ?"); args.push(f.model); }
  return { sql: where.length ? `WHERE ${where.join(" AND ")}` : "", args };
}
