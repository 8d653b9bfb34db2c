/**
 * Counters that tell the server's in-memory caches (key owners, upstream account flags) when
 * to read the database again, so the request path does not query it every time:
 * - `auth()` moves at once when this process revokes a key or changes a user's disabled flag or
 *   role (the workbench, an admin page);
 * - `external()` is SQLite's `PRAGMA data_version`: it moves when another connection (a CLI
 *   command, a second server) commits a write, never for this connection's own writes. Readers
 *   check it throttled; it costs one pragma, not a lookup.
 */
import type { Db } from "./database";

export class Revisions {
  private authRevision = 0;

  constructor(private readonly db: Db) {}

  bumpAuth(): void {
    this.authRevision++;
  }

  auth(): number {
    return this.authRevision;
  }

  external(): number {
    return this.db.query<{ data_version: number }, []>("PRAGMA data_version").get()?.data_version ?? 0;
  }
}
