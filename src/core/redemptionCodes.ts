/**
 * Redemption codes: an admin makes a batch of one-use codes worth N credits each; a signed-in
 * user redeems one on the credits page.
 *
 * - A code is 20 characters from a 32-letter alphabet without look-alikes (no 0/O, 1/I):
 *   100 bits from the CSPRNG, written in four groups of five. Only its SHA-256 is stored, so the
 *   batch's CSV, made once at creation, is the only place the codes exist.
 * - Redeeming marks the code used (by whom, when), raises the balance and writes the ledger's
 *   `redeem` row in one transaction (the store's job): a code redeemed twice at once credits once.
 * - Failed attempts (unknown, used, expired or malformed codes) are throttled per user and per
 *   client address with the sign-in throttle (an AttemptCounter: memory, or Redis), so guessing stays hopeless;
 *   an attempt is counted before its code is tried and given back if it succeeds.
 */
import { giveBackAttempt, memoryAttemptCounters, takeAttempt, type AttemptCounter, type AttemptCounters } from "./attemptLimiter";
import type { Clock } from "./clock";
import { sha256Hex } from "./digest";
import { MAX_CODE_BATCH_SIZE, MAX_CODE_BATCH_NAME_CHARS, MAX_CODE_EXPIRY_DAYS, MAX_CREDIT_GRANT } from "./limits";

/** 32 letters and digits without 0, O, 1 and I: 5 bits per character. */
export const CODE_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
const CODE_CHARS = 20; // 20 × 5 = 100 bits
const GROUP = 5;

export interface RedemptionBatchRow {
  id: number;
  name: string;
  credits: number;
  code_count: number;
  expires_at: number | null;
  created_by: string;
  created_at: number;
}

/** A batch as the admin page lists it: how many of its codes were redeemed. */
export interface RedemptionBatchSummary extends RedemptionBatchRow {
  redeemed: number;
}

export type RedeemOutcome =
  | { ok: true; credits: number; balance: number; batchName: string }
  | { ok: false; reason: "unknown" | "used" | "expired" };

/** What redemption codes need from storage (store/redemptionCodes implements it). */
export interface RedemptionStore {
  /** The batch and all its code hashes, in one transaction. */
  createBatch(batch: Omit<RedemptionBatchRow, "id" | "code_count">, codeHashes: string[]): Promise<RedemptionBatchRow>;
  /** Marks the code used by the user and credits the batch's amount with its ledger row, all or nothing. */
  redeem(codeHash: string, userId: number, now: number): Promise<RedeemOutcome>;
  listBatches(limit: number): Promise<RedemptionBatchSummary[]>;
}

export interface NewBatch {
  name: string;
  credits: number;
  count: number;
  /** Days from now until the codes stop working; null: they never expire. */
  expiresInDays: number | null;
  /** Who made it, as the ledger's actor would name them ("admin:a@b.c", "cli"). */
  createdBy: string;
}

export interface CreatedBatch {
  batch: RedemptionBatchRow;
  /** The codes in clear: returned once, never stored. */
  codes: string[];
}

export type RedeemResult =
  | RedeemOutcome
  | { ok: false; reason: "malformed" }
  | { ok: false; reason: "throttled"; retryAfterMs: number };

/** Which rule a refused batch broke; the workbench words it in the page's language. */
export type BatchProblem = "name" | "credits" | "count" | "expiry";

/** A batch the rules refuse; the (English) message says what to fix, `problem` which rule. */
export class BatchRejected extends Error {
  override name = "BatchRejected";
  constructor(
    readonly problem: BatchProblem,
    message: string,
  ) {
    super(message);
  }
}

export interface RedeemLimits {
  windowMs: number;
  /** Failed attempts allowed per user, and per client address, within the window. */
  perUser: number;
  perAddress: number;
}

export const DEFAULT_REDEEM_LIMITS: RedeemLimits = { windowMs: 15 * 60_000, perUser: 10, perAddress: 30 };

/** A fresh code, grouped for reading: "ABCDE-FGHJK-LMNPQ-RSTUV". */
export function generateCode(): string {
  let raw = "";
  // 256 is a multiple of 32, so `byte % 32` is uniform: no rejection needed.
  for (const byte of crypto.getRandomValues(new Uint8Array(CODE_CHARS))) raw += CODE_ALPHABET[byte % 32];
  return raw.match(new RegExp(`.{${GROUP}}`, "g"))!.join("-");
}

/**
 * The code as stored (hashed): upper case, without spaces and dashes. Null when what is left
 * cannot be a code (wrong length or a letter outside the alphabet).
 */
export function normalizeCode(input: string): string | null {
  if (input.length > 100) return null;
  const raw = input.toUpperCase().replace(/[\s-]/g, "");
  if (raw.length !== CODE_CHARS) return null;
  for (const c of raw) if (!CODE_ALPHABET.includes(c)) return null;
  return raw;
}

export function hashCode(normalized: string): string {
  return sha256Hex(`atelier-code:${normalized}`);
}

/** The batch's codes as CSV: one row per code, with what it is worth and until when. */
export function batchCsv(created: CreatedBatch): string {
  const { batch, codes } = created;
  const expires = batch.expires_at === null ? "" : new Date(batch.expires_at).toISOString();
  // A name starting with = + - @ would be a formula in a spreadsheet: a leading ' keeps it text.
  const text = /^[=+\-@\t\r]/.test(batch.name) ? `'${batch.name}` : batch.name;
  const name = `"${text.replace(/"/g, '""')}"`;
  return ["code,credits,expires_at,batch_id,batch_name", ...codes.map((c) => `${c},${batch.credits},${expires},${batch.id},${name}`)].join("\r\n") + "\r\n";
}

export class RedemptionCodes {
  private readonly perUser: AttemptCounter;
  private readonly perAddress: AttemptCounter;

  constructor(
    private readonly store: RedemptionStore,
    private readonly clock: Clock,
    limits: RedeemLimits = DEFAULT_REDEEM_LIMITS,
    /** Where failed attempts are counted: this process's memory, or Redis shared by every instance ([redis] url). */
    counters: AttemptCounters = memoryAttemptCounters(clock),
  ) {
    this.perUser = counters("redeem:user", limits.perUser, limits.windowMs);
    this.perAddress = counters("redeem:address", limits.perAddress, limits.windowMs);
  }

  /** Checks the batch, makes its codes and stores their hashes; the codes are returned once. */
  async createBatch(input: NewBatch): Promise<CreatedBatch> {
    const name = input.name.trim();
    if (name.length < 1 || name.length > MAX_CODE_BATCH_NAME_CHARS) throw new BatchRejected("name", `Give the batch a name of 1 to ${MAX_CODE_BATCH_NAME_CHARS} characters.`);
    if (!Number.isInteger(input.credits) || input.credits < 1 || input.credits > MAX_CREDIT_GRANT) {
      throw new BatchRejected("credits", `Each code is worth a whole number of credits from 1 to ${MAX_CREDIT_GRANT}.`);
    }
    if (!Number.isInteger(input.count) || input.count < 1 || input.count > MAX_CODE_BATCH_SIZE) {
      throw new BatchRejected("count", `A batch has from 1 to ${MAX_CODE_BATCH_SIZE} codes.`);
    }
    const days = input.expiresInDays;
    if (days !== null && (!Number.isInteger(days) || days < 1 || days > MAX_CODE_EXPIRY_DAYS)) {
      throw new BatchRejected("expiry", `Codes expire after a whole number of days from 1 to ${MAX_CODE_EXPIRY_DAYS}, or never (leave it empty).`);
    }
    const now = this.clock();
    const codes = Array.from({ length: input.count }, generateCode);
    const batch = await this.store.createBatch(
      { name, credits: input.credits, expires_at: days === null ? null : now + days * 86_400_000, created_by: input.createdBy, created_at: now },
      codes.map((c) => hashCode(normalizeCode(c)!)),
    );
    return { batch, codes };
  }

  /** Redeems a code for the user, unless this user or address failed too often recently. */
  async redeem(userId: number, input: string, address: string): Promise<RedeemResult> {
    // Only failures count, but the attempt is taken before the code is tried (concurrent guesses
    // cannot all pass a check made before any counts) and given back when it succeeds.
    const attempt = [[this.perUser, `user:${userId}`], [this.perAddress, address]] as const;
    const wait = await takeAttempt(attempt);
    if (wait > 0) return { ok: false, reason: "throttled", retryAfterMs: wait };
    const normalized = normalizeCode(input);
    const outcome: RedeemResult = normalized === null ? { ok: false, reason: "malformed" } : await this.store.redeem(hashCode(normalized), userId, this.clock());
    if (outcome.ok) await giveBackAttempt(attempt);
    return outcome;
  }

  batches(limit = 200): Promise<RedemptionBatchSummary[]> {
    return this.store.listBatches(limit);
  }
}
