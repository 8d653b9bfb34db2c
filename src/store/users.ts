/**
 * Users. Emails are stored as given and compared case-insensitively as lower(email) = lower(?)
 * on both engines (migration 12's unique index on lower(email) backs it).
 */
import type { SqlClient } from "./sql";
import { isUniqueViolation } from "./sql";
import { updateCachedFact, type Revisions } from "./revisions";
import { EmailTakenError, type Role, type UserRow } from "../core/store";

export { EmailTakenError, type Role, type UserRow } from "../core/store";

export class UserStore {
  constructor(
    private readonly sql: SqlClient,
    /** Told when a fact a cached key owner holds (disabled, role) changes. */
    private readonly revisions?: Revisions,
  ) {}

  /** Creates a user; initial credits are written as a grant so the ledger sums to the balance. */
  async create(input: { email: string; passwordHash: string | null; role: Role; credits: number; note?: string; actor?: string }, now: number): Promise<UserRow> {
    return this.sql.transaction(async (tx) => {
      let row: UserRow | null;
      try {
        row = await tx.get<UserRow>(
          "INSERT INTO users (email, password_hash, role, credits, created_at) VALUES (?, ?, ?, 0, ?) RETURNING *",
          [input.email, input.passwordHash, input.role, now],
        );
      } catch (e) {
        if (isUniqueViolation(e)) throw new EmailTakenError(`a user with email ${input.email} already exists`);
        throw e;
      }
      if (!row) throw new Error("insert returned no row");
      if (input.credits > 0) {
        await tx.run("UPDATE users SET credits = credits + ? WHERE id = ?", [input.credits, row.id]);
        await tx.run("INSERT INTO ledger (user_id, kind, amount, note, actor, created_at) VALUES (?, 'grant', ?, ?, ?, ?)", [
          row.id,
          input.credits,
          input.note ?? "initial credits",
          input.actor ?? null,
          now,
        ]);
        row.credits = input.credits;
      }
      return row;
    });
  }

  byId(id: number): Promise<UserRow | null> {
    return this.sql.get<UserRow>("SELECT * FROM users WHERE id = ?", [id]);
  }

  byEmail(email: string): Promise<UserRow | null> {
    return this.sql.get<UserRow>("SELECT * FROM users WHERE lower(email) = lower(?)", [email]);
  }

  /** Users whose email contains `search` (any case), by id; a negative limit lists them all. */
  list(opts: { search?: string; limit?: number; offset?: number } = {}): Promise<UserRow[]> {
    const like = `%${(opts.search ?? "").replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    const limit = opts.limit ?? 1000;
    const where = "SELECT * FROM users WHERE lower(email) LIKE lower(?) ESCAPE '\\' ORDER BY id";
    if (limit < 0) return this.sql.all<UserRow>(where, [like]);
    return this.sql.all<UserRow>(`${where} LIMIT ? OFFSET ?`, [like, limit, opts.offset ?? 0]);
  }

  async countAdmins(): Promise<number> {
    return (await this.sql.get<{ n: number }>("SELECT COUNT(*) AS n FROM users WHERE role = 'admin'"))?.n ?? 0;
  }

  setDisabled(id: number, disabled: boolean): Promise<boolean> {
    return this.changeCachedFact("UPDATE users SET disabled = ? WHERE id = ?", [disabled ? 1 : 0, id]);
  }

  setRole(id: number, role: Role): Promise<boolean> {
    return this.changeCachedFact("UPDATE users SET role = ? WHERE id = ?", [role, id]);
  }

  /** A new password also moves the revisions: whatever holds the user in memory reads it again. */
  setPasswordHash(id: number, hash: string): Promise<boolean> {
    return this.changeCachedFact("UPDATE users SET password_hash = ? WHERE id = ?", [hash, id]);
  }

  private async changeCachedFact(statement: string, params: (string | number)[]): Promise<boolean> {
    const changed = await updateCachedFact(this.sql, statement, params);
    this.revisions?.bumpAuth();
    return changed;
  }
}
