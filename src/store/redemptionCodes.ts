/**
 * Redemption codes: batches and hashed codes. A redemption is one transaction: the code's
 * used-by/used-at, the balance and the ledger's `redeem` row commit together or not at all; the
 * guard is the code's NULL → user transition (a conditional UPDATE, so on PostgreSQL a second
 * redemption of the same code waits for the first and then matches nothing), and the ledger's
 * unique index on code_id backs it up.
 */
import type { SqlClient, SqlQueries } from "./sql";
import type { RedeemOutcome, RedemptionBatchRow, RedemptionBatchSummary, RedemptionStore } from "../core/redemptionCodes";

/** Codes inserted per statement: one round trip per chunk, well under both engines' parameter limits. */
const CODES_PER_INSERT = 500;

export class RedemptionCodeStore implements RedemptionStore {
  constructor(private readonly sql: SqlClient) {}

  createBatch(batch: Omit<RedemptionBatchRow, "id" | "code_count">, codeHashes: string[]): Promise<RedemptionBatchRow> {
    return this.sql.transaction(async (tx) => {
      const row = await tx.get<RedemptionBatchRow>(
        "INSERT INTO redemption_batches (name, credits, code_count, expires_at, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
        [batch.name, batch.credits, codeHashes.length, batch.expires_at, batch.created_by, batch.created_at],
      );
      if (!row) throw new Error("insert returned no row");
      for (let i = 0; i < codeHashes.length; i += CODES_PER_INSERT) {
        const chunk = codeHashes.slice(i, i + CODES_PER_INSERT);
        await tx.run(
          `INSERT INTO redemption_codes (batch_id, code_hash) VALUES ${chunk.map(() => "(?, ?)").join(", ")}`,
          chunk.flatMap((hash) => [row.id, hash]),
        );
      }
      return row;
    });
  }

  redeem(codeHash: string, userId: number, now: number): Promise<RedeemOutcome> {
    return this.sql.transaction(async (tx): Promise<RedeemOutcome> => {
      const claimed = await tx.get<{ id: number; credits: number; name: string; batch_id: number }>(
        `UPDATE redemption_codes SET redeemed_by = ?, redeemed_at = ?
          WHERE code_hash = ? AND redeemed_by IS NULL
            AND batch_id IN (SELECT id FROM redemption_batches WHERE expires_at IS NULL OR expires_at > ?)
         RETURNING id, batch_id, (SELECT credits FROM redemption_batches b WHERE b.id = batch_id) AS credits,
                   (SELECT name FROM redemption_batches b WHERE b.id = batch_id) AS name`,
        [userId, now, codeHash, now],
      );
      if (!claimed) return { ok: false, reason: await whyNot(tx, codeHash) };
      const balance = await tx.get<{ credits: number }>("UPDATE users SET credits = credits + ? WHERE id = ? RETURNING credits", [claimed.credits, userId]);
      if (!balance) throw new RangeError(`no user with id ${userId}`);
      await tx.run("INSERT INTO ledger (user_id, kind, amount, note, actor, code_id, created_at) VALUES (?, 'redeem', ?, ?, ?, ?, ?)", [
        userId,
        claimed.credits,
        `code from batch "${claimed.name}"`,
        `code:${claimed.batch_id}`,
        claimed.id,
        now,
      ]);
      return { ok: true, credits: claimed.credits, balance: balance.credits, batchName: claimed.name };
    });
  }

  listBatches(limit: number): Promise<RedemptionBatchSummary[]> {
    return this.sql.all<RedemptionBatchSummary>(
      `SELECT b.*, (SELECT COUNT(*) FROM redemption_codes c WHERE c.batch_id = b.id AND c.redeemed_by IS NOT NULL) AS redeemed
         FROM redemption_batches b ORDER BY b.id DESC LIMIT ?`,
      [limit],
    );
  }
}

/** Why a code could not be claimed (read inside the redemption's transaction). */
async function whyNot(tx: SqlQueries, codeHash: string): Promise<"unknown" | "used" | "expired"> {
  const code = await tx.get<{ redeemed_by: number | null }>("SELECT redeemed_by FROM redemption_codes WHERE code_hash = ?", [codeHash]);
  if (!code) return "unknown";
  return code.redeemed_by === null ? "expired" : "used";
}
