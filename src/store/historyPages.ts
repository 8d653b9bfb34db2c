/**
 * The request history a page at a time (a user's Credits page, the admin's All requests), at a
 * cost bounded however long the history is: pages follow a cursor (the time and id of a row
 * they stop at) instead of an OFFSET, rows are read from an index in time order, and a page
 * whose filter the index cannot serve (status, model, key, chat) searches at most
 * HISTORY_SCAN_ROWS rows; if those hold too few matches the page says so and its links carry
 * on from where the search stopped. The total comes from chat_usage (chat rows are counted per
 * day as they are written, migration 16) plus a count of image rows, whose number credits bound.
 *
 * With a million rows, OFFSET paging and COUNT(*) cost a deep page or a filter that matched
 * nothing 0.3-0.5 s, and the admin's landing page 0.5 s (a sort of the whole table), on the
 * serving thread (bench/history-pages.ts).
 */
import type { SqlQueries, SqlValue } from "./sql";
import type { RequestRow } from "./requests";
import { DAY_MS } from "../core/utcDays";

/** The most rows one page reads past its cursor when its filter is not served by an index. */
export const HISTORY_SCAN_ROWS = 2000;

/** A place in the history's order (newest first, ties by id): the row a page stopped at. */
export interface HistoryCursor {
  createdAt: number;
  id: string;
}

export interface HistoryFilter {
  userId?: number;
  keyId?: number;
  /** One request by its id. */
  id?: string;
  /** created_at at or after this (ms); for the total, a UTC midnight. */
  from?: number;
  /** created_at before this (ms); for the total, a UTC midnight. */
  before?: number;
  kind?: RequestRow["kind"];
  status?: RequestRow["status"];
  model?: string;
}

/** Where a page starts: after a cursor towards older rows, or towards newer ones; the newest page without either. */
export type HistoryPosition = { older: HistoryCursor } | { newer: HistoryCursor } | null;

export interface HistoryPage {
  /** Newest first. */
  rows: RequestRow[];
  /** The cursor of the next newer page, or null on the newest page. */
  newer: HistoryCursor | null;
  /** The cursor of the next older page, or null when nothing older is left. */
  older: HistoryCursor | null;
  /** The page stopped at the search bound before it was full: more rows lie beyond its links. */
  partial: boolean;
}

/** The WHERE clause split into what an index serves in time order and what is checked row by row. */
interface Conditions {
  indexed: string[];
  indexedArgs: SqlValue[];
  residual: string[];
  residualArgs: SqlValue[];
}

function conditionsOf(f: HistoryFilter): Conditions {
  const c: Conditions = { indexed: [], indexedArgs: [], residual: [], residualArgs: [] };
  if (f.userId !== undefined) { c.indexed.push("user_id = ?"); c.indexedArgs.push(f.userId); }
  // A literal, so that the planner may use the image rows' partial indexes.
  if (f.kind === "image") c.indexed.push("kind = 'image'");
  if (f.kind === "chat") c.residual.push("kind = 'chat'");
  if (f.from !== undefined) { c.indexed.push("created_at >= ?"); c.indexedArgs.push(f.from); }
  if (f.before !== undefined) { c.indexed.push("created_at < ?"); c.indexedArgs.push(f.before); }
  if (f.keyId !== undefined) { c.residual.push("key_id = ?"); c.residualArgs.push(f.keyId); }
  if (f.status) { c.residual.push("status = ?"); c.residualArgs.push(f.status); }
  if (f.model !== undefined) { c.residual.push("model = ?"); c.residualArgs.push(f.model); }
  return c;
}

/** The whole filter as one WHERE clause (for reads that are not pages: `list`, `count`). */
export function filterClause(f: HistoryFilter): { sql: string; args: SqlValue[] } {
  const c = conditionsOf(f);
  const terms = f.id === undefined ? [...c.indexed, ...c.residual] : ["id = ?", ...c.indexed, ...c.residual];
  const args = f.id === undefined ? [...c.indexedArgs, ...c.residualArgs] : [f.id, ...c.indexedArgs, ...c.residualArgs];
  return { sql: where(terms), args };
}

const where = (terms: string[]) => (terms.length ? `WHERE ${terms.join(" AND ")}` : "");
const cursorOf = (r: { created_at: number; id: string }): HistoryCursor => ({ createdAt: r.created_at, id: r.id });

/**
 * One page of `size` rows of the history that `f` selects, from `at`. Each statement reads at
 * most `size + 1` rows, or HISTORY_SCAN_ROWS when the filter has conditions no index serves.
 */
export async function historyPage(sql: SqlQueries, f: HistoryFilter, at: HistoryPosition, size: number, scanRows = HISTORY_SCAN_ROWS): Promise<HistoryPage> {
  if (f.id !== undefined) {
    const one = filterClause(f);
    return { rows: await sql.all<RequestRow>(`SELECT * FROM requests ${one.sql}`, one.args), newer: null, older: null, partial: false };
  }
  const towardsNewer = at !== null && "newer" in at;
  const cursor = at === null ? null : "newer" in at ? at.newer : at.older;
  const c = conditionsOf(f);
  const { indexed, indexedArgs } = c;
  if (cursor) {
    // (created_at, id) beyond the cursor, written so that an index on created_at serves it.
    indexed.push(towardsNewer ? "created_at >= ? AND (created_at > ? OR id > ?)" : "created_at <= ? AND (created_at < ? OR id < ?)");
    indexedArgs.push(cursor.createdAt, cursor.createdAt, cursor.id);
  }
  const order = towardsNewer ? "ORDER BY created_at ASC, id ASC" : "ORDER BY created_at DESC, id DESC";
  const scan = `SELECT * FROM requests ${where(indexed)} ${order}`;
  // Without conditions to check row by row, the index alone finds the page; otherwise the rows
  // are searched in order, at most scanRows of them (the subquery's LIMIT), and the first
  // matches kept. Both engines read a LIMITed subquery lazily, in its order.
  const found =
    c.residual.length === 0
      ? await sql.all<RequestRow>(`${scan} LIMIT ?`, [...indexedArgs, size + 1])
      : await sql.all<RequestRow>(`SELECT * FROM (${scan} LIMIT ?) AS searched ${where(c.residual)} LIMIT ?`, [...indexedArgs, scanRows, ...c.residualArgs, size + 1]);
  // Sorted here as well, for the order shown. Which rows a search keeps does rely on the engines
  // reading the subquery in its order (SQL does not promise it; both do, and the tests check it on both).
  found.sort(towardsNewer ? (a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1) : (a, b) => b.created_at - a.created_at || (a.id < b.id ? 1 : -1));
  const full = found.length > size;
  const rows = found.slice(0, size);
  // A page that is not full either ran out of rows or stopped at the search bound with rows
  // left beyond it: then the last row searched is where the search carries on.
  const searchedTo = full || c.residual.length === 0 ? null : await lastSearchedBeforeMore(sql, scan, order, indexedArgs, scanRows);
  if (towardsNewer) {
    // Nothing newer left to search: this is the newest page, which is the one without a cursor (and full).
    if (!full && !searchedTo) return historyPage(sql, f, null, size, scanRows);
    rows.reverse();
    const newest = full ? cursorOf(rows[0]!) : cursorOf(searchedTo!);
    return { rows, newer: newest, older: rows.length > 0 ? cursorOf(rows.at(-1)!) : cursorOf(searchedTo!), partial: !full };
  }
  const older = full ? cursorOf(rows.at(-1)!) : searchedTo ? cursorOf(searchedTo) : null;
  const newer = cursor === null ? null : rows.length > 0 ? cursorOf(rows[0]!) : cursor;
  return { rows, newer, older, partial: !full && searchedTo !== null };
}

/**
 * The scanRows-th row of the search, if more rows follow it; null when the search reached the
 * end. Read through the same LIMITed subquery as the page: asked directly for two columns at
 * an OFFSET, SQLite's planner sorted the whole table instead of reading the time index (0.8 s
 * with a million rows).
 */
async function lastSearchedBeforeMore(sql: SqlQueries, scan: string, order: string, args: SqlValue[], scanRows: number): Promise<{ created_at: number; id: string } | null> {
  const rows = await sql.all<{ created_at: number; id: string }>(`SELECT created_at, id FROM (${scan} LIMIT ?) AS searched ${order} LIMIT 2 OFFSET ?`, [...args, scanRows + 1, scanRows - 1]);
  return rows.length === 2 ? rows[0]! : null;
}

/**
 * How many requests `f` selects, exactly, without reading the chat rows: chat from chat_usage
 * (written in the chat rows' own transaction), image rows counted. `from` and `before`, when
 * given, must be UTC midnights (the workbench's date filters are whole days).
 */
export async function historyTotal(sql: SqlQueries, f: HistoryFilter): Promise<number> {
  if (f.id !== undefined) {
    const one = filterClause(f);
    return (await sql.get<{ n: number }>(`SELECT CAST(COUNT(*) AS BIGINT) AS n FROM requests ${one.sql}`, one.args))?.n ?? 0;
  }
  for (const bound of [f.from, f.before]) {
    if (bound !== undefined && bound % DAY_MS !== 0) throw new Error(`historyTotal: ${bound} is not a UTC midnight`);
  }
  let total = 0;
  // Chat rows are written finished: never pending or interrupted.
  if (f.kind !== "image" && f.status !== "pending" && f.status !== "interrupted") {
    const terms: string[] = [];
    const args: SqlValue[] = [];
    if (f.userId !== undefined) { terms.push("user_id = ?"); args.push(f.userId); }
    if (f.keyId !== undefined) { terms.push("key_id = ?"); args.push(f.keyId); }
    if (f.model !== undefined) { terms.push("model = ?"); args.push(f.model); }
    if (f.from !== undefined) { terms.push("day >= ?"); args.push(f.from / DAY_MS); }
    if (f.before !== undefined) { terms.push("day < ?"); args.push(f.before / DAY_MS); }
    const column = f.status === "succeeded" ? "succeeded" : f.status === "failed" ? "failed" : "requests";
    total += (await sql.get<{ n: number | null }>(`SELECT CAST(SUM(${column}) AS BIGINT) AS n FROM chat_usage ${where(terms)}`, args))?.n ?? 0;
  }
  if (f.kind !== "chat") {
    const images = filterClause({ ...f, kind: "image" });
    total += (await sql.get<{ n: number }>(`SELECT CAST(COUNT(*) AS BIGINT) AS n FROM requests ${images.sql}`, images.args))?.n ?? 0;
  }
  return total;
}
