import { isDatabaseUnreachable, type SqlClient, type SqlValue } from "./sql";
import type { ChatRecord, RequestLog, TraceFields, WriteAttempt } from "../core/store";
import { BatchWriter } from "../core/batchWriter";
import { isWriteConflict } from "./busy";
import { DAY_MS } from "../core/utcDays";
import { filterClause, historyPage, historyTotal, type HistoryCursor, type HistoryFilter, type HistoryPage, type HistoryPosition } from "./historyPages";
import { TASK_EXPIRES_AT_SQL } from "./tasks";

/**
 * How chat rows are batched: written at most this often, this many per transaction, and at most
 * this many kept waiting while the database is locked by another process.
 */
export const CHAT_BATCH = { intervalMs: 20, maxBatch: 2000, maxQueued: 100_000 };

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
  /** The engine's own redacted words about a failure (upstream, account, transport error): admins only (issue 16). */
  error_detail: string | null;
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

/** A history filter (store/historyPages) with a plain LIMIT/OFFSET slice, for `list`. */
export interface RequestFilter extends HistoryFilter {
  limit?: number;
  offset?: number;
}

export interface RequestStoreOptions {
  /** The chat batch's timer (a fake one in tests); real timers by default. */
  schedule?: (fn: () => void, ms: number) => () => void;
  batch?: Partial<typeof CHAT_BATCH>;
}

export class RequestStore implements RequestLog {
  /**
   * Chat rows wait here (by id, for the access log) until the next batch: chat is free, so a
   * crash may lose the last batch; image rows never come here, they are written with their charge.
   */
  private queuedChats = new Map<string, RequestRow>();
  private readonly chatBatch: BatchWriter<RequestRow>;
  /** Where rows that can never be written are reported (the server's logger, once wired). */
  onDroppedRows: (count: number, error: unknown) => void = (count, error) => console.error(`dropped ${count} chat history rows: ${String(error)}`);

  constructor(
    private readonly sql: SqlClient,
    opts: RequestStoreOptions = {},
  ) {
    this.chatBatch = new BatchWriter<RequestRow>({
      ...CHAT_BATCH,
      ...opts.batch,
      schedule: opts.schedule,
      write: (rows) => this.insertChats(rows),
      isRetryable: isWriteConflict,
      // A batch that failed otherwise is taken apart to drop only the rows at fault (one
      // client's row must not cost other clients their history); unreachable, no row is.
      atFaultMayBeRows: (e) => !isDatabaseUnreachable(e),
      onDropped: (rows, error) => {
        for (const r of rows) this.queuedChats.delete(r.id);
        this.onDroppedRows(rows.length, error);
      },
    });
  }

  /** Writes the queued chat rows now (a reader of the history calls this first); false while the database is locked. */
  flushChats(): Promise<boolean> {
    return this.chatBatch.flush();
  }

  /** Writes what is queued and writes later rows at once (the store is closing). */
  stopChats(): Promise<boolean> {
    return this.chatBatch.stop();
  }

  /**
   * One request's record for the access log: a queued chat row, else the stored row; never
   * flushes (the log line of every chat request would otherwise write a batch of one).
   */
  async recordOf(id: string): Promise<RequestRow | null> {
    return this.queuedRecordOf(id) ?? (await this.sql.get<RequestRow>("SELECT * FROM requests WHERE id = ?", [id]));
  }

  /** A chat row still queued for the next batch (what recordOf finds first), without a promise. */
  queuedRecordOf(id: string): RequestRow | undefined {
    return this.queuedChats.get(id);
  }

  /** Requests charged and not yet finished (indexed by status). */
  async pendingCount(): Promise<number> {
    // Chat rows are never pending: no flush needed.
    return (await this.sql.get<{ n: number }>("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM requests WHERE status = 'pending'"))?.n ?? 0;
  }

  async get(id: string): Promise<RequestRow | null> {
    await this.flushChats();
    return this.sql.get<RequestRow>("SELECT * FROM requests WHERE id = ?", [id]);
  }

  /**
   * A charged image request that succeeded: the charge stands. False when it was no longer
   * pending; a retry (`retry.mayHaveLanded`) that finds it succeeded is true: its earlier run
   * committed (only the request's own flow marks it succeeded), its answer lost.
   */
  async markSucceeded(id: string, t: { queueMs: number; generationMs: number; task?: { result: string; expiresAt: number } } & TraceFields, now: number, retry?: WriteAttempt): Promise<boolean> {
    return this.sql.transaction(async (tx) => {
      // Conditional on 'pending': a racing refund (or another instance's recovery) wins or loses as a whole.
      const changed =
        (
          await tx.run(
            `UPDATE requests SET status = 'succeeded', queue_ms = ?, generation_ms = ?, upstream_id = ?, account_id = ?,
                    attempts = ?, upstream_latency_ms = ?, finished_at = ? WHERE id = ? AND status = 'pending'`,
            [t.queueMs, t.generationMs, t.upstreamId ?? null, t.accountId ?? null, t.attempts ?? null, t.upstreamLatencyMs ?? null, now, id],
          )
        ).changes === 1;
      if (!changed) return retry?.mayHaveLanded === true && (await tx.get<{ status: string }>("SELECT status FROM requests WHERE id = ?", [id]))?.status === "succeeded";
      if (t.task) {
        await tx.run(`UPDATE tasks SET status = 'succeeded', result = ?, finished_at = ?, expires_at = ${TASK_EXPIRES_AT_SQL} WHERE id = ? AND status IN ('queued', 'running')`, [
          t.task.result, now, t.task.expiresAt, t.task.expiresAt, id,
        ]);
      }
      await tx.run("DELETE FROM task_inputs WHERE task_id = ?", [id]);
      return true;
    });
  }

  /** Upstream details for a request regardless of outcome (a failure still shows what was tried). */
  async recordTrace(id: string, t: TraceFields): Promise<void> {
    await this.sql.run("UPDATE requests SET upstream_id = ?, account_id = ?, attempts = ?, upstream_latency_ms = ? WHERE id = ?", [
      t.upstreamId ?? null, t.accountId ?? null, t.attempts ?? null, t.upstreamLatencyMs ?? null, id,
    ]);
  }

  /** Chat is free: one finished row, no ledger entry; queued and written with the next batch. */
  recordChat(r: ChatRecord, now: number): void {
    const row: RequestRow = {
      id: r.id, user_id: r.userId, key_id: r.keyId, kind: "chat", endpoint: "/v1/chat/completions", model: r.model, status: r.status,
      credits_charged: 0, credits_refunded: 0, queue_ms: r.queueMs ?? null, generation_ms: r.generationMs ?? null,
      error_code: r.errorCode ?? null, error_message: r.errorMessage ?? null, error_detail: r.errorDetail ?? null, prompt: r.prompt ?? null,
      prompt_tokens: r.promptTokens ?? null, completion_tokens: r.completionTokens ?? null, upstream_id: r.upstreamId ?? null,
      account_id: r.accountId ?? null, attempts: r.attempts ?? null, upstream_latency_ms: r.upstreamLatencyMs ?? null,
      created_at: now - (r.generationMs ?? 0), finished_at: now,
    };
    this.queuedChats.set(row.id, row);
    this.chatBatch.add(row);
  }

  /**
   * One transaction for the whole batch, in a few multi-row INSERTs (rows are appended: ids are
   * time-ordered). One statement per row cost each row a statement's whole round (SQLite: its
   * step and bindings; PostgreSQL: a round trip), several times the row's own B-tree work.
   */
  private async insertChats(rows: RequestRow[]): Promise<void> {
    await this.sql.transaction(async (tx) => {
      let at = 0;
      for (const size of CHAT_INSERT_SIZES) {
        for (; rows.length - at >= size; at += size) await tx.run(CHAT_INSERTS.get(size)!, chatInsertParams(rows, at, size));
      }
      // The usage report's counts of these rows, in the same transaction: a batch is usually one
      // or two (user, day, model, key) groups, so this is a statement or two per batch. In the
      // groups' order, so two instances' batches never wait for each other's rows in a cycle.
      for (const g of chatUsageGroups(rows)) await tx.run(CHAT_USAGE_UPSERT, [g.userId, g.day, g.model, g.keyId, g.requests, g.succeeded, g.failed]);
    });
    // Rebuilt from the rows still queued rather than deleted from: JavaScriptCore keeps what an
    // entry deleted from a long-lived Map referenced alive through the next young-generation
    // collection (bench/gc-churn.ts), so every written row would be promoted as garbage.
    const queued = new Map<string, RequestRow>();
    for (const r of this.chatBatch.pending()) queued.set(r.id, r);
    this.queuedChats = queued;
  }

  /**
   * Rows by a filter, newest first, read directly (OFFSET, no bound): what tests check the history
   * with. The workbench's pages read historyPage, whose cost does not grow with the history.
   */
  async list(f: RequestFilter = {}): Promise<RequestRow[]> {
    await this.flushChats();
    const { sql, args } = filterClause(f);
    return this.sql.all<RequestRow>(`SELECT * FROM requests ${sql} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`, [...args, f.limit ?? 50, f.offset ?? 0]);
  }

  /**
   * Credits each of these users spent on images: charged minus refunded (pending requests count:
   * their credit is out). Read from the requests_user_spend index (image rows only, migration 15).
   */
  async spentByUsers(userIds: number[]): Promise<Map<number, number>> {
    if (userIds.length === 0) return new Map();
    const rows = await this.sql.all<{ user_id: number; spent: number }>(
      `SELECT user_id, CAST(SUM(credits_charged - credits_refunded) AS BIGINT) AS spent FROM requests
        WHERE kind = 'image' AND user_id IN (${userIds.map(() => "?").join(", ")}) GROUP BY user_id`,
      userIds,
    );
    return new Map(rows.map((r) => [r.user_id, r.spent]));
  }

  /**
   * One page of a user's history for the CSV export, newest first, after the cursor (the last
   * row of the previous page): a history page without a filter, read from the user's time index
   * from the cursor on, so each page costs the same however deep it is. (Written as
   * `created_at < ? OR (created_at = ? AND id < ?)`, the cursor was no range on the index: each
   * page read the user's rows from the newest down to it, and a million rows took 71 s to export,
   * its slowest page 175 ms on the serving thread.)
   */
  async exportPage(userId: number, after: HistoryCursor | null, limit: number): Promise<RequestRow[]> {
    // The queued chat rows are written once, for the first page; the later ones read on from it.
    if (after === null) return (await this.historyPage({ userId }, null, limit)).rows;
    return (await historyPage(this.sql, { userId }, { older: after }, limit)).rows;
  }

  /** One page of the history (store/historyPages), with the chat rows still queued written first. */
  async historyPage(f: HistoryFilter, at: HistoryPosition, size: number): Promise<HistoryPage> {
    await this.flushChats();
    return historyPage(this.sql, f, at, size);
  }

  /** How many requests the history filter selects (store/historyPages), with the chat rows still queued written first. */
  async historyTotal(f: HistoryFilter): Promise<number> {
    await this.flushChats();
    return historyTotal(this.sql, f);
  }

  /** Rows by a filter, counted one by one (tests; historyTotal counts without reading chat rows). */
  async count(f: RequestFilter = {}): Promise<number> {
    await this.flushChats();
    const { sql, args } = filterClause(f);
    return (await this.sql.get<{ n: number }>(`SELECT CAST(COUNT(*) AS BIGINT) AS n FROM requests ${sql}`, args))?.n ?? 0;
  }
}

/**
 * Rows per INSERT statement, largest first: a batch is cut into these sizes, so only four
 * statement texts exist (each prepared once) and any batch takes at most a few statements per
 * 64 rows. 64 rows × 20 parameters stays far below both engines' parameter limits.
 */
const CHAT_INSERT_SIZES = [64, 16, 4, 1] as const;
const CHAT_ROW_VALUES = "(?, ?, ?, 'chat', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
const CHAT_ROW_PARAMS = 20;
const CHAT_INSERTS = new Map<number, string>(
  CHAT_INSERT_SIZES.map((size) => [
    size,
    `INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, prompt, prompt_tokens, completion_tokens,
                           generation_ms, queue_ms, error_code, error_message, error_detail, upstream_id, account_id, attempts,
                           upstream_latency_ms, created_at, finished_at)
     VALUES ${Array.from({ length: size }, () => CHAT_ROW_VALUES).join(", ")}`,
  ]),
);

/** Adds a batch's counts to its groups' rows of chat_usage (migration 16). */
const CHAT_USAGE_UPSERT = `INSERT INTO chat_usage (user_id, day, model, key_id, requests, succeeded, failed) VALUES (?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (user_id, day, model, key_id) DO UPDATE SET requests = chat_usage.requests + excluded.requests,
    succeeded = chat_usage.succeeded + excluded.succeeded, failed = chat_usage.failed + excluded.failed`;

interface ChatUsageGroup {
  userId: number;
  day: number;
  model: string;
  /** 0: no key (the signed-in workbench). */
  keyId: number;
  requests: number;
  succeeded: number;
  failed: number;
}

/** A batch's chat rows counted per (user, UTC day, model, key), in a fixed order of the groups. */
function chatUsageGroups(rows: readonly RequestRow[]): ChatUsageGroup[] {
  const groups = new Map<string, ChatUsageGroup>();
  let g: ChatUsageGroup | undefined;
  for (const r of rows) {
    const day = Math.floor(r.created_at / DAY_MS);
    const keyId = r.key_id ?? 0;
    // Rows of one client come in runs: the group of the row before, found without a key string.
    if (g === undefined || g.userId !== r.user_id || g.day !== day || g.keyId !== keyId || g.model !== r.model) {
      const id = `${r.user_id} ${day} ${keyId} ${r.model}`;
      g = groups.get(id);
      if (!g) groups.set(id, (g = { userId: r.user_id, day, model: r.model, keyId, requests: 0, succeeded: 0, failed: 0 }));
    }
    g.requests++;
    if (r.status === "succeeded") g.succeeded++;
    else if (r.status === "failed" || r.status === "interrupted") g.failed++;
  }
  const byKey = (a: ChatUsageGroup, b: ChatUsageGroup) => a.userId - b.userId || a.day - b.day || a.keyId - b.keyId || (a.model < b.model ? -1 : a.model > b.model ? 1 : 0);
  return [...groups.values()].sort(byKey);
}

/** The parameters of rows[at, at + size) in CHAT_ROW_VALUES order. */
function chatInsertParams(rows: readonly RequestRow[], at: number, size: number): SqlValue[] {
  const params = new Array<SqlValue>(size * CHAT_ROW_PARAMS);
  let p = 0;
  for (let i = at; i < at + size; i++) {
    const r = rows[i]!;
    params[p++] = r.id; params[p++] = r.user_id; params[p++] = r.key_id; params[p++] = r.endpoint; params[p++] = r.model;
    params[p++] = r.status; params[p++] = r.prompt; params[p++] = r.prompt_tokens; params[p++] = r.completion_tokens; params[p++] = r.generation_ms;
    params[p++] = r.queue_ms; params[p++] = r.error_code; params[p++] = r.error_message; params[p++] = r.error_detail; params[p++] = r.upstream_id;
    params[p++] = r.account_id; params[p++] = r.attempts; params[p++] = r.upstream_latency_ms; params[p++] = r.created_at; params[p++] = r.finished_at;
  }
  return params;
}

