/**
 * Every statement the history pages and their totals (store/historyPages) run, for the tests that
 * explain each one on an engine (database.test.ts on SQLite, historyPagesOnBothEngines on
 * PostgreSQL): each filter the workbench can send, from the newest page and from a cursor both ways.
 */
import { historyPage, historyTotal, type HistoryCursor, type HistoryFilter } from "../../src/store/historyPages";
import type { SqlQueries, SqlValue } from "../../src/store/sql";

export type Statement = [sql: string, params: readonly SqlValue[]];

/** Runs 25-row pages (the workbench's size) and totals for every kind of filter on `users`' rows; answers what they ran. */
export async function historyStatements(client: SqlQueries, users: [number, number], cursor: HistoryCursor): Promise<Statement[]> {
  const statements: Statement[] = [];
  const recording: SqlQueries = {
    dialect: client.dialect,
    all: (sql, params = []) => (statements.push([sql, params]), client.all(sql, params)),
    get: (sql, params = []) => (statements.push([sql, params]), client.get(sql, params)),
    run: (sql, params = []) => client.run(sql, params),
  };
  const [first, second] = users;
  const filters: HistoryFilter[] = [
    {}, { userId: first }, { kind: "image" }, { userId: first, kind: "image" }, { kind: "chat" }, { status: "failed" }, { userId: first, status: "failed", model: "m" },
    { keyId: 1 }, { from: 0, before: 86_400_000 }, { userId: second, from: 0, before: 86_400_000, kind: "image" },
  ];
  for (const f of filters) {
    for (const at of [null, { older: cursor }, { newer: cursor }]) await historyPage(recording, f, at, 25);
    await historyTotal(recording, f);
  }
  return statements;
}
