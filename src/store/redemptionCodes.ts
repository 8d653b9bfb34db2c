/**
 * Redemption codes on SQLite: batches and hashed codes. A redemption is one IMMEDIATE
 * transaction: the code's used-by/used-at, the balance and the ledger's `redeem` row commit
 * together or not at all; the guard is the code's NULL → user transition, and the ledger's
 * unique index on code_id backs it up.
 */
import type { Db } from "./database";
import type { RedeemOutcome, RedemptionBatchRow, RedemptionBatchSummary, RedemptionStore } from "../core/redemptionCodes";

export class SqliteRedemptionStore implements RedemptionStore {
  constructor(private readonly db: Db) {}

  createBatch(batch: Omit<RedemptionBatchRow, "id" | "code_count">, codeHashes: string[]): RedemptionBatchRow {
    return this.db.transaction(() => {
      const row = this.db
        .query<RedemptionBatchRow, [string, number, number, number | null, string, number]>(
          "INSERT INTO redemption_batches (name, credits, code_count, expires_at, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
        )
        .get(batch.name, batch.credits, codeHashes.length, batch.expires_at, batch.created_by, batch.created_at);
      if (!row) throw new Error("insert returned no row");
      const insert = this.db.query("INSERT INTO redemption_codes (batch_id, code_hash) VALUES (?, ?)");
      for (const hash of codeHashes) insert.run(row.id, hash);
      return row;
    }).immediate();
  }

  redeem(codeHash: string, userId: number, now: number): RedeemOutcome {
    return this.db.transaction((): RedeemOutcome => {
      const claimed = this.db
        .query<{ id: number; credits: number; name: string; batch_id: number }, [number, number, string, number]>(
          `UPDATE redemption_codes SET redeemed_by = ?, redeemed_at = ?
            WHERE code_hash = ? AND redeemed_by IS NULL
              AND batch_id IN (SELECT id FROM redemption_batches WHERE expires_at IS NULL OR expires_at > ?)
           RETURNING id, batch_id, (SELECT credits FROM redemption_batches b WHERE b.id = batch_id) AS credits,
                     (SELECT name FROM redemption_batches b WHERE b.id = batch_id) AS name`,
        )
        .get(userId, now, codeHash, now);
      if (!claimed) return { ok: false, reason: this.whyNot(codeHash) };
      const balance = this.db
        .query<{ credits: number }, [number, number]>("UPDATE users SET credits = credits + ? WHERE id = ? RETURNING credits")
        .get(claimed.credits, userId);
      if (!balance) throw new RangeError(`no user with id ${userId}`);
      this.db
        .query("INSERT INTO ledger (user_id, kind, amount, note, actor, code_id, created_at) VALUES (?, 'redeem', ?, ?, ?, ?, ?)")
        .run(userId, claimed.credits, `code from batch "${claimed.name}"`, `code:${claimed.batch_id}`, claimed.id, now);
      return { ok: true, credits: claimed.credits, balance: balance.credits, batchName: claimed.name };
    }).immediate();
  }

  /** Why a code could not be claimed (read inside the redemption's transaction). */
  private whyNot(codeHash: string): "unknown" | "used" | "expired" {
    const code = this.db
      .query<{ redeemed_by: number | null }, [string]>("SELECT redeemed_by FROM redemption_codes WHERE code_hash = ?")
      .get(codeHash);
    if (!code) return "unknown";
    return code.redeemed_by === null ? "expired" : "used";
  }

  listBatches(limit: number): RedemptionBatchSummary[] {
    return this.db
      .query<RedemptionBatchSummary, [number]>(
        `SELECT b.*, (SELECT COUNT(*) FROM redemption_codes c WHERE c.batch_id = b.id AND c.redeemed_by IS NOT NULL) AS redeemed
           FROM redemption_batches b ORDER BY b.id DESC LIMIT ?`,
      )
      .all(limit);
  }
}
