import type { Db } from "./database";
import type { ApiKeyRow, KeyOwner } from "../core/store";
import { isDatabaseBusy } from "./busy";

export type { ApiKeyRow, KeyOwner } from "../core/store";

export class ApiKeyStore {
  constructor(private readonly db: Db) {}

  create(input: { userId: number; name: string; prefix: string; secretHash: string }, now: number): ApiKeyRow {
    const row = this.db
      .query<ApiKeyRow, [number, string, string, string, number]>(
        "INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (?, ?, ?, ?, ?) RETURNING *",
      )
      .get(input.userId, input.name, input.prefix, input.secretHash, now);
    if (!row) throw new Error("insert returned no row");
    return row;
  }

  ownerByHash(secretHash: string): KeyOwner | null {
    return this.db
      .query<KeyOwner, [string]>(
        `SELECT k.id AS key_id, k.prefix AS key_prefix, k.revoked_at AS key_revoked_at, u.id AS user_id, u.email, u.role, u.disabled
           FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.secret_hash = ?`,
      )
      .get(secretHash);
  }

  listForUser(userId: number): ApiKeyRow[] {
    return this.db.query<ApiKeyRow, [number]>("SELECT * FROM api_keys WHERE user_id = ? ORDER BY id DESC").all(userId);
  }

  byPrefix(prefix: string): ApiKeyRow | null {
    return this.db.query<ApiKeyRow, [string]>("SELECT * FROM api_keys WHERE prefix = ?").get(prefix);
  }

  /** Revokes a key; with userId, only that user's key. Returns false when nothing matched or it was already revoked. */
  revoke(keyId: number, now: number, userId?: number): boolean {
    const sql = userId === undefined
      ? "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
      : "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL AND user_id = ?";
    const args = userId === undefined ? [now, keyId] : [now, keyId, userId];
    return this.db.query(sql).run(...(args as [number, number])).changes === 1;
  }

  /** last_used_at is a hint: while another process holds the write lock it is skipped (false). */
  touch(keyId: number, now: number): boolean {
    try {
      this.db.query("UPDATE api_keys SET last_used_at = ? WHERE id = ?").run(now, keyId);
      return true;
    } catch (e) {
      if (isDatabaseBusy(e)) return false;
      throw e;
    }
  }
}
