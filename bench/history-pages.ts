/**
 * What the history pages (a user's Credits page, the admin's All requests) cost with a long
 * history, the way they were read before migration 17 (OFFSET pages, COUNT(*) totals: their SQL
 * is kept here) beside today's (store/historyPages: cursor pages from an index in time order, a
 * bounded search, totals from chat_usage), on the same rows in two SQLite files (migration 16, this tree's schema); and what migration 17's
 * time index costs a chat row written (the store's own batches at schema 16 and at this tree's,
 * alternating); and the CSV export's page at the same depth, its old cursor beside today's.
 *
 *   bun bench/history-pages.ts [chat rows=1000000] [written rows=128000]
 *
 * The database holds `chat rows` chat requests of one user over the last 30 days (what a busy
 * chat client leaves in a month), and 200 image requests of another user. Prints the median of
 * 5 reads per case, and checks that both ways give the same rows and totals where they show the
 * same thing.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore } from "../src/store";
import { latestVersion, openDatabase } from "../src/store/database";
import { migrations } from "../src/store/migrations";
import type { HistoryFilter, HistoryPage, HistoryPosition } from "../src/store/historyPages";
import type { RequestRow } from "../src/store/requests";
import { DAY_MS } from "../src/core/utcDays";
import { median } from "./support/chatBench";

const chatRows = Math.max(1000, Math.min(5_000_000, Number(process.argv[2] ?? 1_000_000)));
const writtenRows = Math.max(1000, Math.min(1_000_000, Number(process.argv[3] ?? 128_000)));
const PAGE = 25;
const NOW = Date.now();
const FROM = NOW - 30 * DAY_MS;

const dir = mkdtempSync(join(tmpdir(), "atelier-history-pages-"));
try {
  // The same rows in two files: at migration 16 (read the old way) and at this tree's schema.
  const seed = (version: number) => {
    const db = openDatabase(join(dir, `read-${version}`), migrations.filter((m) => m.version <= version));
    db.run("INSERT INTO users (email, password_hash, credits, created_at) VALUES ('chat@example.com', NULL, 0, 0), ('images@example.com', NULL, 0, 0)");
    const step = Math.floor((NOW - FROM) / chatRows);
    db.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
       INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, prompt, created_at, finished_at)
       SELECT printf('req_%012d', i), 1, NULL, 'chat', '/v1/chat/completions', 'mock-chat', 'succeeded', 'Rewrite: Red kettle 1.7L stainless', ? + i * ?, ? + i * ? FROM n`,
      [chatRows, FROM, step, FROM, step],
    );
    // chat_usage as the server's batches would have kept it.
    db.run(`INSERT INTO chat_usage (user_id, day, model, key_id, requests, succeeded, failed)
            SELECT user_id, created_at / ${DAY_MS}, model, 0, COUNT(*), COUNT(*), 0 FROM requests GROUP BY user_id, created_at / ${DAY_MS}, model`);
    for (let i = 0; i < 200; i++) {
      db.run("INSERT INTO requests (id, user_id, kind, endpoint, model, status, credits_charged, created_at) VALUES (?, 2, 'image', '/v1/images/generations', 'img', 'succeeded', 1, ?)", [
        `req_img_${String(i).padStart(4, "0")}`, FROM + i * 1000,
      ]);
    }
    return createStore(db, version);
  };
  const before = seed(16);
  const store = seed(latestVersion());
  const sql = before.sql;

  /** The pages' reads before migration 17. */
  const offsetPage = (f: HistoryFilter, page: number) => {
    const { where, args } = oldWhere(f);
    return sql.all<RequestRow>(`SELECT * FROM requests ${where} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`, [...args, PAGE, (page - 1) * PAGE]);
  };
  const countAll = async (f: HistoryFilter) => {
    const { where, args } = oldWhere(f);
    return (await sql.get<{ n: number }>(`SELECT CAST(COUNT(*) AS BIGINT) AS n FROM requests ${where}`, args))!.n;
  };
  const deep = Math.floor(chatRows / 2 / PAGE);
  // The cursor a reader following Older would hold at that depth (the row just before it).
  const deepRow = (await offsetPage({ userId: 1 }, deep - 1)).at(-1)!;
  const deepAt: HistoryPosition = { older: { createdAt: deepRow.created_at, id: deepRow.id } };

  const cases: { name: string; filter: HistoryFilter; oldPage: number; at: HistoryPosition }[] = [
    { name: "user: newest page", filter: { userId: 1 }, oldPage: 1, at: null },
    { name: `user: page ${deep} (halfway)`, filter: { userId: 1 }, oldPage: deep, at: deepAt },
    { name: "user: status=pending (none)", filter: { userId: 1, status: "pending" }, oldPage: 1, at: null },
    { name: "user: model=other (none)", filter: { userId: 1, model: "other" }, oldPage: 1, at: null },
    { name: "user: kind=image (none)", filter: { userId: 1, kind: "image" }, oldPage: 1, at: null },
    { name: "admin: everyone, newest page", filter: {}, oldPage: 1, at: null },
    { name: "admin: everyone, status=failed", filter: { status: "failed" }, oldPage: 1, at: null },
    { name: "admin: everyone, kind=image", filter: { kind: "image" }, oldPage: 1, at: null },
  ];
  const timed = async <T>(f: () => Promise<T>): Promise<{ ms: number; value: T }> => {
    const times: number[] = [];
    let value!: T;
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      value = await f();
      times.push(performance.now() - started);
    }
    return { ms: median(times), value };
  };
  console.log(`${chatRows} chat rows of one user over 30 days, 200 image rows of another; one page = ${PAGE} rows (median of 5, ms)`);
  console.log(`${"".padEnd(34)}${"before (migration 16)".padStart(22)}  ${"this tree".padStart(18)}`);
  console.log(`${"page".padEnd(34)}${"OFFSET page".padStart(12)}${"COUNT(*)".padStart(10)}${"cursor page".padStart(13)}${"total".padStart(8)}   rows  total`);
  for (const c of cases) {
    const oldRows = await timed(() => offsetPage(c.filter, c.oldPage));
    const oldTotal = await timed(() => countAll(c.filter));
    const page = await timed<HistoryPage>(() => store.requests.historyPage(c.filter, c.at, PAGE));
    const total = await timed(() => store.requests.historyTotal(c.filter));
    // The same rows where the old page shows the same ones (a page that stopped at the search bound shows fewer).
    const same = page.value.partial || JSON.stringify(page.value.rows.map((r) => r.id)) === JSON.stringify(oldRows.value.map((r) => r.id));
    if (!same || total.value !== oldTotal.value) throw new Error(`${c.name}: rows or totals differ (${total.value} vs ${oldTotal.value})`);
    console.log(
      `${c.name.padEnd(34)}${oldRows.ms.toFixed(2).padStart(12)}${oldTotal.ms.toFixed(2).padStart(10)}${page.ms.toFixed(2).padStart(13)}${total.ms.toFixed(2).padStart(8)}   ${String(page.value.rows.length).padStart(4)}${page.value.partial ? "*" : " "} ${total.value}`,
    );
  }
  console.log("(* the page stopped at the search bound and says so; its Older link carries the search on)");

  // The CSV export's pages of 500: its cursor before this tree (an OR the index could not range over) and today's.
  const EXPORT_ROWS = 500;
  const oldExportPage = (after: { createdAt: number; id: string }) =>
    sql.all<RequestRow>(
      "SELECT * FROM requests WHERE user_id = ? AND (created_at < ? OR (created_at = ? AND id < ?)) ORDER BY created_at DESC, id DESC LIMIT ?",
      [1, after.createdAt, after.createdAt, after.id, EXPORT_ROWS],
    );
  const halfway = { createdAt: deepRow.created_at, id: deepRow.id };
  const oldHalfway = await timed(() => oldExportPage(halfway));
  const newHalfway = await timed(() => store.requests.exportPage(1, halfway, EXPORT_ROWS));
  if (JSON.stringify(oldHalfway.value.map((r) => r.id)) !== JSON.stringify(newHalfway.value.map((r) => r.id))) throw new Error("the export pages differ");
  let after: { createdAt: number; id: string } | null = null;
  let exported = 0;
  const started = performance.now();
  for (;;) {
    const rows = await store.requests.exportPage(1, after, EXPORT_ROWS);
    exported += rows.length;
    if (rows.length < EXPORT_ROWS) break;
    after = { createdAt: rows.at(-1)!.created_at, id: rows.at(-1)!.id };
  }
  const wholeMs = performance.now() - started;
  if (exported !== chatRows) throw new Error(`exported ${exported} rows of ${chatRows}`);
  console.log(`\nCSV export, pages of ${EXPORT_ROWS}: the page halfway (after row ${(deep - 1) * PAGE}) ${oldHalfway.ms.toFixed(2)} ms before, ${newHalfway.ms.toFixed(2)} ms now (same rows);`);
  console.log(`the whole export now: ${chatRows} rows in ${(wholeMs / 1000).toFixed(1)} s of store reads (before: each page read the user's rows from the newest down to it)`);
  await store.close();
  await before.close();

  // What the time index costs the chat rows written: the store's own batches, schema 16 beside this tree's, alternating.
  const perRow: Record<string, number[]> = { "migration 16": [], [`migration ${latestVersion()}`]: [] };
  for (let pair = 0; pair < 3; pair++) {
    for (const [name, version] of [["migration 16", 16], [`migration ${latestVersion()}`, latestVersion()]] as const) {
      const path = join(dir, `write-${pair}-${version}`);
      const w = createStore(openDatabase(path, migrations.filter((m) => m.version <= version)), version);
      await w.sql.run("INSERT INTO users (email, password_hash, credits, created_at) VALUES ('w@example.com', NULL, 0, 0)");
      const started = performance.now();
      for (let i = 0; i < writtenRows; i++) {
        w.requests.recordChat({ id: `req_${String(i).padStart(12, "0")}`, userId: 1, keyId: null, model: "mock-chat", status: "succeeded", prompt: "Rewrite: Red kettle 1.7L stainless", generationMs: 0 }, NOW + i);
        if (i % 64 === 63) await w.requests.flushChats();
      }
      await w.requests.flushChats();
      perRow[name]!.push(((performance.now() - started) * 1000) / writtenRows);
      await w.close();
      rmSync(path, { recursive: true, force: true });
    }
  }
  console.log(`\nchat rows written through the store's batches of 64 (${writtenRows} rows per run, 3 alternating pairs), µs per row:`);
  for (const [name, us] of Object.entries(perRow)) console.log(`${name.padEnd(14)} ${us.map((u) => u.toFixed(2)).join("  ")}   median ${median(us).toFixed(2)}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

/** The WHERE clause the pages used before migration 17. */
function oldWhere(f: HistoryFilter): { where: string; args: (string | number)[] } {
  const terms: string[] = [];
  const args: (string | number)[] = [];
  if (f.userId !== undefined) { terms.push("user_id = ?"); args.push(f.userId); }
  if (f.kind) { terms.push("kind = ?"); args.push(f.kind); }
  if (f.status) { terms.push("status = ?"); args.push(f.status); }
  if (f.model) { terms.push("model = ?"); args.push(f.model); }
  return { where: terms.length ? `WHERE ${terms.join(" AND ")}` : "", args };
}
