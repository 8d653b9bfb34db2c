/** Workbench sessions: only a hash of the cookie value is stored, with its CSRF token and expiry. */
import type { Db } from "./database";
import type { SessionRecords, SessionRow, SessionWithUser } from "../core/sessions";
import type { UserRow } from "../core/store";

export type { SessionRow, SessionWithUser } from "../core/sessions";

export class SessionStore implements SessionRecords {
  constructor(private readonly db: Db) {}

  create(row: SessionRow): void {
    this.db
      .query("INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)")
      .run(row.id_hash, row.user_id, row.csrf_token, row.created_at, row.expires_at);
  }

  /** The live session and its user; expired rows are not returned. */
  find(idHash: string, now: number): SessionWithUser | null {
    const s = this.db
      .query<SessionRow, [string, number]>("SELECT * FROM sessions WHERE id_hash = ? AND expires_at > ?")
      .get(idHash, now);
    if (!s) return null;
    const user = this.db.query<UserRow, [number]>("SELECT * FROM users WHERE id = ?").get(s.user_id);
    return user ? { ...s, user } : null;
  }

  delete(idHash: string): void {
    this.db.query("DELETE FROM sessions WHERE id_hash = ?").run(idHash);
  }

  /** Ends every session of a user (e.g. when an admin disables the account). */
  deleteForUser(userId: number): void {
    this.db.query("DELETE FROM sessions WHERE user_id = ?").run(userId);
  }

  deleteExpired(now: number): number {
    return this.db.query("DELETE FROM sessions WHERE expires_at <= ?").run(now).changes;
  }
}
