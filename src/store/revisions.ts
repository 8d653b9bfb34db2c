/**
 * Counters that tell the server's in-memory caches (key owners, upstream account flags) when
 * to read the database again, so the request path does not query it every time:
 * - `auth()` moves at once when this process revokes a key or changes a user's disabled flag,
 *   role, password or a key's settings (the workbench, an admin page);
 * - `shared()` is the `store_revision` row (migration 12): every write that changes a fact
 *   another process or instance may hold in memory bumps it in its own transaction
 *   (`bumpExternal`), so a CLI command or another server's write is seen on SQLite and on
 *   PostgreSQL alike (keys, users, upstream accounts' disabled flags). Readers check it
 *   throttled; it costs one primary-key read.
 */
import type { SqlClient, SqlQueries, SqlValue } from "./sql";

/**
 * Moves the shared revision; call it inside the transaction of the write it announces. An
 * upsert: the row exists from the first bump on (no row reads as 0), and concurrent bumps on
 * PostgreSQL queue on its row lock, each adding one.
 */
export async function bumpExternal(tx: SqlQueries): Promise<void> {
  await tx.run("INSERT INTO store_revision (id, value) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET value = store_revision.value + 1");
}

/**
 * One UPDATE of a fact other processes cache (a key's revocation or settings, a user's flag),
 * with the shared revision's bump when it matched a row: both commit or neither.
 */
export async function updateCachedFact(sql: SqlClient, statement: string, params: readonly SqlValue[]): Promise<boolean> {
  return sql.transaction(async (tx) => {
    const hit = (await tx.run(statement, params)).changes === 1;
    if (hit) await bumpExternal(tx);
    return hit;
  });
}

export class Revisions {
  private authRevision = 0;

  constructor(private readonly sql: SqlQueries) {}

  bumpAuth(): void {
    this.authRevision++;
  }

  auth(): number {
    return this.authRevision;
  }

  /** The store_revision counter (see bumpExternal). */
  async shared(): Promise<number> {
    return (await this.sql.get<{ value: number }>("SELECT value FROM store_revision WHERE id = 1"))?.value ?? 0;
  }
}
