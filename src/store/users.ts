import type { Db } from "./database";
import type { Revisions } from "./revisions";
import { EmailTakenError, type Role, type UserRow } from "../core/store";

export { EmailTakenError, type Role, type UserRow } from "../core/store";

export class UserStore {
  constructor(
    private readonly db: Db,
    /** Told when a fact a cached key owner holds (disabled, role) changes. */
    private readonly revisions?: Revisions,
  ) {}

  /** Creates a user; initial credits are written as a grant so the ledger sums to the balance. */
  create(input: { email: string; passwordHash: string | null; role: Role; credits: number; note?: string; actor?: string }, now: number): UserRow {
    return this.db.transaction(() => {
      let row: UserRow | null;
      try {
        row = this.db
          .query<UserRow, [string, string | null, Role, number]>(
            "INSERT INTO users (email, password_hash, role, credits, created_at) VALUES (?, ?, ?, 0, ?) RETURNING *",
          )
          .get(input.email, input.passwordHash, input.role, now);
      } catch (e) {
        if (String((e as Error).message).includes("UNIQUE")) throw new EmailTakenError(`a user with email ${input.email} already exists`);
        throw e;
      }
      if (!row) throw new Error("insert returned no row");
      if (input.credits > 0) {
        this.db.query("UPDATE users SET credits = credits + ? WHERE id = ?").run(input.credits, row.id);
        this.db
          .query("INSERT INTO ledger (user_id, kind, amount, note, actor, created_at) VALUES (?, 'grant', ?, ?, ?, ?)")
          .run(row.id, input.credits, input.note ?? "initial credits", input.actor ?? null, now);
        row.credits = input.credits;
      }
      return row;
    }).immediate();
  }

  byId(id: number): UserRow | null {
    return this.db.query<UserRow, [number]>("SELECT * FROM users WHERE id = ?").get(id);
  }

  byEmail(email: string): UserRow | null {
    return this.db.query<UserRow, [string]>("SELECT * FROM users WHERE email = ?").get(email);
  }

  list(opts: { search?: string; limit?: number; offset?: number } = {}): UserRow[] {
    const like = `%${(opts.search ?? "").replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    return this.db
      .query<UserRow, [string, number, number]>(
        "SELECT * FROM users WHERE email LIKE ? ESCAPE '\\' ORDER BY id LIMIT ? OFFSET ?",
      )
      .all(like, opts.limit ?? 1000, opts.offset ?? 0);
  }

  countAdmins(): number {
    return this.db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM users WHERE role = 'admin'").get()?.n ?? 0;
  }

  setDisabled(id: number, disabled: boolean): boolean {
    const changed = this.db.query("UPDATE users SET disabled = ? WHERE id = ?").run(disabled ? 1 : 0, id).changes === 1;
    this.revisions?.bumpAuth();
    return changed;
  }

  setRole(id: number, role: Role): boolean {
    const changed = this.db.query("UPDATE users SET role = ? WHERE id = ?").run(role, id).changes === 1;
    this.revisions?.bumpAuth();
    return changed;
  }

  setPasswordHash(id: number, hash: string): boolean {
    return this.db.query("UPDATE users SET password_hash = ? WHERE id = ?").run(hash, id).changes === 1;
  }
}
