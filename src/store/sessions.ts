/** Workbench sessions: only a hash of the cookie value is stored, with its CSRF token and expiry. */
import type { SqlClient } from "./sql";
import type { SessionRecords, SessionRow, SessionWithUser } from "../core/sessions";
import type { UserRow } from "../core/store";

export type { SessionRow, SessionWithUser } from "../core/sessions";

export class SessionStore implements SessionRecords {
  constructor(private readonly sql: SqlClient) {}

  async create(row: SessionRow): Promise<void> {
    await this.sql.run("INSERT INTO sessions (id_hash, user_id, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)", [
      row.id_hash,
      row.user_id,
      row.csrf_token,
      row.created_at,
      row.expires_at,
    ]);
  }

  /** The live session and its user; expired rows are not returned. */
  async find(idHash: string, now: number): Promise<SessionWithUser | null> {
    const s = await this.sql.get<SessionRow>("SELECT * FROM sessions WHERE id_hash = ? AND expires_at > ?", [idHash, now]);
    if (!s) return null;
    const user = await this.sql.get<UserRow>("SELECT * FROM users WHERE id = ?", [s.user_id]);
    return user ? { ...s, user } : null;
  }

  async delete(idHash: string): Promise<void> {
    await this.sql.run("DELETE FROM sessions WHERE id_hash = ?", [idHash]);
  }

  /** Ends every session of a user (e.g. when an admin disables the account). */
  async deleteForUser(userId: number): Promise<void> {
    await this.sql.run("DELETE FROM sessions WHERE user_id = ?", [userId]);
  }

  async deleteExpired(now: number): Promise<number> {
    return (await this.sql.run("DELETE FROM sessions WHERE expires_at <= ?", [now])).changes;
  }
}
