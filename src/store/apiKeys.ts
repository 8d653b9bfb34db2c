import type { SqlClient } from "./sql";
import type { ApiKeyRow, KeyOwner } from "../core/store";
import { isDatabaseBusy } from "./busy";
import { serializeAllowedModels, type KeyLimits, type KeySettings } from "../core/keyLimits";
import { Revisions, updateCachedFact } from "./revisions";

export type { ApiKeyRow, KeyOwner } from "../core/store";

/** A key with what it has spent (charged minus refunded), for lists and /v1/me. */
export type ApiKeyWithSpend = ApiKeyRow & { credits_spent: number };

/**
 * A key's spend: charged minus refunded over its image requests (pending ones count: their
 * credit is out; chat rows charge nothing). Answered from the requests_key_spend index alone,
 * which holds image rows only: `kind = 'image'` is what lets the planner use it (migration 15),
 * so the sum never reads the key's chat history. Shared with store/credits, which sums it inside
 * the charge's transaction. (CAST: PostgreSQL's SUM of integers is numeric otherwise.)
 */
export const KEY_SPEND_SQL =
  "SELECT COALESCE(CAST(SUM(credits_charged - credits_refunded) AS BIGINT), 0) AS spent FROM requests WHERE key_id = ? AND kind = 'image'";

export class ApiKeyStore {
  constructor(
    private readonly sql: SqlClient,
    private readonly revisions: Revisions = new Revisions(sql),
  ) {}

  /** Moves at once when this process revokes a key or changes a user's disabled flag or role. */
  localRevision(): number {
    return this.revisions.auth();
  }

  /** Moves when any process or instance committed a write a cached key owner may hold (store_revision). */
  externalRevision(): Promise<number> {
    return this.revisions.shared();
  }

  async create(input: { userId: number; name: string; prefix: string; secretHash: string; limits?: KeyLimits }, now: number): Promise<ApiKeyRow> {
    const l = input.limits;
    const row = await this.sql.get<ApiKeyRow>(
      `INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at, expires_at, credit_cap, allowed_models)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`,
      [input.userId, input.name, input.prefix, input.secretHash, now, l?.expiresAt ?? null, l?.creditCap ?? null, serializeAllowedModels(l?.allowedModels ?? null)],
    );
    if (!row) throw new Error("insert returned no row");
    return row;
  }

  ownerByHash(secretHash: string): Promise<KeyOwner | null> {
    return this.sql.get<KeyOwner>(
      `SELECT k.id AS key_id, k.prefix AS key_prefix, k.revoked_at AS key_revoked_at, k.name AS key_name, k.created_at AS key_created_at,
              k.expires_at AS key_expires_at, k.credit_cap AS key_credit_cap, k.allowed_models AS key_allowed_models,
              u.id AS user_id, u.email, u.role, u.disabled
         FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.secret_hash = ?`,
      [secretHash],
    );
  }

  listForUser(userId: number): Promise<ApiKeyRow[]> {
    return this.sql.all<ApiKeyRow>("SELECT * FROM api_keys WHERE user_id = ? ORDER BY id DESC", [userId]);
  }

  /** The user's keys, newest first, each with its spend (one grouped pass over the key-spend index: image rows only). */
  listWithSpend(userId: number): Promise<ApiKeyWithSpend[]> {
    return this.sql.all<ApiKeyWithSpend>(
      `SELECT k.*, COALESCE(s.spent, 0) AS credits_spent FROM api_keys k
         LEFT JOIN (SELECT key_id, CAST(SUM(credits_charged - credits_refunded) AS BIGINT) AS spent FROM requests
                     WHERE kind = 'image' AND key_id IN (SELECT id FROM api_keys WHERE user_id = ?) GROUP BY key_id) s ON s.key_id = k.id
        WHERE k.user_id = ? ORDER BY k.id DESC`,
      [userId, userId],
    );
  }

  /** Credits the key has spent (see KEY_SPEND_SQL). */
  async spent(keyId: number): Promise<number> {
    return (await this.sql.get<{ spent: number }>(KEY_SPEND_SQL, [keyId]))?.spent ?? 0;
  }

  /**
   * Renames a key and replaces its limits; only the user's own key, and not a revoked one.
   * Returns false when nothing matched.
   */
  async updateSettings(keyId: number, userId: number, s: KeySettings): Promise<boolean> {
    const changed = await updateCachedFact(
      this.sql,
      "UPDATE api_keys SET name = ?, expires_at = ?, credit_cap = ?, allowed_models = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL",
      [s.name, s.expiresAt, s.creditCap, serializeAllowedModels(s.allowedModels), keyId, userId],
    );
    // A cached owner holds the limits: the next request must see the new ones.
    this.revisions.bumpAuth();
    return changed;
  }

  /** Display prefixes of these keys (the admin's request list names each request's key). */
  async prefixesOf(keyIds: number[]): Promise<Map<number, string>> {
    if (keyIds.length === 0) return new Map();
    const rows = await this.sql.all<{ id: number; prefix: string }>(`SELECT id, prefix FROM api_keys WHERE id IN (${keyIds.map(() => "?").join(", ")})`, keyIds);
    return new Map(rows.map((r) => [r.id, r.prefix]));
  }

  byPrefix(prefix: string): Promise<ApiKeyRow | null> {
    return this.sql.get<ApiKeyRow>("SELECT * FROM api_keys WHERE prefix = ?", [prefix]);
  }

  /** Revokes a key; with userId, only that user's key. Returns false when nothing matched or it was already revoked. */
  async revoke(keyId: number, now: number, userId?: number): Promise<boolean> {
    const changed =
      userId === undefined
        ? await updateCachedFact(this.sql, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [now, keyId])
        : await updateCachedFact(this.sql, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL AND user_id = ?", [now, keyId, userId]);
    this.revisions.bumpAuth();
    return changed;
  }

  /** last_used_at is a hint: while another process holds the write lock it is skipped (false). */
  async touch(keyId: number, now: number): Promise<boolean> {
    try {
      await this.sql.run("UPDATE api_keys SET last_used_at = ? WHERE id = ?", [now, keyId]);
      return true;
    } catch (e) {
      if (isDatabaseBusy(e)) return false;
      throw e;
    }
  }
}
