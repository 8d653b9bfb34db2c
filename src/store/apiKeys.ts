import type { Db } from "./database";
import type { ApiKeyRow, KeyOwner } from "../core/store";
import { isDatabaseBusy } from "./busy";
import { serializeAllowedModels, type KeyLimits, type KeySettings } from "../core/keyLimits";
import { Revisions } from "./revisions";

export type { ApiKeyRow, KeyOwner } from "../core/store";

/** A key with what it has spent (charged minus refunded), for lists and /v1/me. */
export type ApiKeyWithSpend = ApiKeyRow & { credits_spent: number };

/**
 * A key's spend: charged minus refunded over its requests (pending ones count: their credit is
 * out). Answered from the requests_key_spend index alone. Shared with store/credits, which sums it
 * inside the charge's transaction.
 */
export const KEY_SPEND_SQL = "SELECT COALESCE(SUM(credits_charged - credits_refunded), 0) AS spent FROM requests WHERE key_id = ?";

export class ApiKeyStore {
  constructor(
    private readonly db: Db,
    private readonly revisions: Revisions = new Revisions(db),
  ) {}

  /** Moves at once when this process revokes a key or changes a user's disabled flag or role. */
  localRevision(): number {
    return this.revisions.auth();
  }

  /** Moves when another process committed a write (it may have revoked a key). */
  externalRevision(): number {
    return this.revisions.external();
  }

  create(input: { userId: number; name: string; prefix: string; secretHash: string; limits?: KeyLimits }, now: number): ApiKeyRow {
    const l = input.limits;
    const row = this.db
      .query<ApiKeyRow, [number, string, string, string, number, number | null, number | null, string | null]>(
        `INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at, expires_at, credit_cap, allowed_models)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`,
      )
      .get(input.userId, input.name, input.prefix, input.secretHash, now, l?.expiresAt ?? null, l?.creditCap ?? null, serializeAllowedModels(l?.allowedModels ?? null));
    if (!row) throw new Error("insert returned no row");
    return row;
  }

  ownerByHash(secretHash: string): KeyOwner | null {
    return this.db
      .query<KeyOwner, [string]>(
        `SELECT k.id AS key_id, k.prefix AS key_prefix, k.revoked_at AS key_revoked_at, k.name AS key_name, k.created_at AS key_created_at,
                k.expires_at AS key_expires_at, k.credit_cap AS key_credit_cap, k.allowed_models AS key_allowed_models,
                u.id AS user_id, u.email, u.role, u.disabled
           FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.secret_hash = ?`,
      )
      .get(secretHash);
  }

  listForUser(userId: number): ApiKeyRow[] {
    return this.db.query<ApiKeyRow, [number]>("SELECT * FROM api_keys WHERE user_id = ? ORDER BY id DESC").all(userId);
  }

  /** The user's keys, newest first, each with its spend (one grouped pass over the requests index). */
  listWithSpend(userId: number): ApiKeyWithSpend[] {
    return this.db
      .query<ApiKeyWithSpend, [number, number]>(
        `SELECT k.*, COALESCE(s.spent, 0) AS credits_spent FROM api_keys k
           LEFT JOIN (SELECT key_id, SUM(credits_charged - credits_refunded) AS spent FROM requests
                       WHERE key_id IN (SELECT id FROM api_keys WHERE user_id = ?) GROUP BY key_id) s ON s.key_id = k.id
          WHERE k.user_id = ? ORDER BY k.id DESC`,
      )
      .all(userId, userId);
  }

  /** Credits the key has spent (see KEY_SPEND_SQL). */
  spent(keyId: number): number {
    return this.db.query<{ spent: number }, [number]>(KEY_SPEND_SQL).get(keyId)?.spent ?? 0;
  }

  /**
   * Renames a key and replaces its limits; only the user's own key, and not a revoked one.
   * Returns false when nothing matched.
   */
  updateSettings(keyId: number, userId: number, s: KeySettings): boolean {
    const changed =
      this.db
        .query("UPDATE api_keys SET name = ?, expires_at = ?, credit_cap = ?, allowed_models = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL")
        .run(s.name, s.expiresAt, s.creditCap, serializeAllowedModels(s.allowedModels), keyId, userId).changes === 1;
    // A cached owner holds the limits: the next request must see the new ones.
    this.revisions.bumpAuth();
    return changed;
  }

  /** Display prefixes of these keys (the admin's request list names each request's key). */
  prefixesOf(keyIds: number[]): Map<number, string> {
    if (keyIds.length === 0) return new Map();
    const rows = this.db
      .query<{ id: number; prefix: string }, number[]>(`SELECT id, prefix FROM api_keys WHERE id IN (${keyIds.map(() => "?").join(", ")})`)
      .all(...keyIds);
    return new Map(rows.map((r) => [r.id, r.prefix]));
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
    const changed = this.db.query(sql).run(...(args as [number, number])).changes === 1;
    this.revisions.bumpAuth();
    return changed;
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
