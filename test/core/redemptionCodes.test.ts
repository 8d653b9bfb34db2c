/**
 * Redemption codes against the real SQLite store in memory and a fake clock: the code's shape
 * and entropy, hashes only at rest, one transaction per redemption (balance, ledger row, used
 * by/at), expiry, and the throttle on failed attempts per user and per address.
 */
import { describe, expect, test } from "bun:test";
import { BatchRejected, CODE_ALPHABET, RedemptionCodes, batchCsv, generateCode, hashCode, normalizeCode } from "../../src/core/redemptionCodes";
import { fakeClock } from "../support/fakeClock";
import { addUser, memoryStore, rawDb } from "../support/memoryStore";

function setup(limits = { windowMs: 60_000, perUser: 3, perAddress: 5 }) {
  const clock = fakeClock();
  const store = memoryStore();
  const codes = new RedemptionCodes(store.redemptions, clock.now, limits);
  return { clock, store, codes };
}

describe("a code", () => {
  test("is 20 characters of an alphabet without look-alikes (100 bits), in four groups of five, never repeated", () => {
    expect(CODE_ALPHABET).toHaveLength(32);
    for (const c of "01OI") expect(CODE_ALPHABET).not.toContain(c);
    const seen = new Set<string>();
    const counts = new Map<string, number>();
    for (let i = 0; i < 2000; i++) {
      const code = generateCode();
      expect(code).toMatch(/^[2-9A-HJ-NP-Z]{5}(-[2-9A-HJ-NP-Z]{5}){3}$/);
      seen.add(code);
      for (const ch of code.replace(/-/g, "")) counts.set(ch, (counts.get(ch) ?? 0) + 1);
    }
    expect(seen.size).toBe(2000);
    // 40 000 characters over 32 letters: every letter is used, none far off its 1250 share.
    expect(counts.size).toBe(32);
    for (const n of counts.values()) expect(Math.abs(n - 1250)).toBeLessThan(250);
  });

  test("is read in any case, with or without spaces and dashes; anything else is malformed", () => {
    const code = generateCode();
    const raw = code.replace(/-/g, "");
    expect(normalizeCode(code)).toBe(raw);
    expect(normalizeCode(` ${code.toLowerCase().replace(/-/g, " ")} `)).toBe(raw);
    expect(normalizeCode(raw.slice(1))).toBeNull();
    expect(normalizeCode(`O${raw.slice(1)}`)).toBeNull();
    expect(normalizeCode("x".repeat(10_000))).toBeNull();
  });
});

describe("a batch", () => {
  test("keeps only the codes' hashes; the CSV made at creation is the only copy of the codes", async () => {
    const { codes, store } = setup();
    const created = await codes.createBatch({ name: "=launch, \"spring\"", credits: 25, count: 3, expiresInDays: 30, createdBy: "admin:a@b.c" });
    expect(created.codes).toHaveLength(3);
    const stored = rawDb(store).query<{ code_hash: string }, []>("SELECT code_hash FROM redemption_codes ORDER BY id").all();
    expect(stored.map((r) => r.code_hash)).toEqual(created.codes.map((c) => hashCode(normalizeCode(c)!)));
    const dump = JSON.stringify(rawDb(store).query("SELECT * FROM redemption_codes, redemption_batches").all());
    for (const c of created.codes) {
      expect(dump).not.toContain(c);
      expect(dump).not.toContain(normalizeCode(c)!);
    }
    const csv = batchCsv(created).split("\r\n");
    expect(csv[0]).toBe("code,credits,expires_at,batch_id,batch_name");
    // The name is quoted, its quotes doubled, and a leading = cannot become a spreadsheet formula.
    expect(csv[1]).toBe(`${created.codes[0]},25,${new Date(created.batch.expires_at!).toISOString()},${created.batch.id},"'=launch, ""spring"""`);
    expect(csv).toHaveLength(5);
    expect(await codes.batches()).toEqual([{ ...created.batch, redeemed: 0 }]);
  });

  test("refuses a missing name, credits or counts out of range, and a bad expiry, writing nothing", async () => {
    const { codes, store } = setup();
    const ok = { name: "b", credits: 5, count: 2, expiresInDays: null, createdBy: "cli" };
    for (const bad of [{ name: "  " }, { credits: 0 }, { credits: 1.5 }, { credits: 1_000_000_001 }, { count: 0 }, { count: 10_001 }, { expiresInDays: 0 }, { expiresInDays: 3651 }]) {
      await expect(codes.createBatch({ ...ok, ...bad })).rejects.toThrow(BatchRejected);
    }
    expect(rawDb(store).query<{ n: number }, []>("SELECT COUNT(*) AS n FROM redemption_codes").get()!.n).toBe(0);
  });
});

describe("redeeming", () => {
  test("credits the batch's amount with one ledger row naming the code, and marks the code used by the user, at once", async () => {
    const { codes, store, clock } = setup();
    const user = addUser(store, 2);
    const { codes: [code], batch } = await codes.createBatch({ name: "promo", credits: 40, count: 1, expiresInDays: null, createdBy: "cli" });
    clock.advance(1000);
    expect(await codes.redeem(user, code!, "10.0.0.1")).toEqual({ ok: true, credits: 40, balance: 42, batchName: "promo" });
    expect(await store.credits.balance(user)).toBe(42);
    expect(await store.credits.ledgerSum(user)).toBe(42);
    const row = (await store.credits.ledger(user))[0]!;
    expect(row).toMatchObject({ kind: "redeem", amount: 40, actor: `code:${batch.id}`, request_id: null, created_at: clock.now() });
    const used = rawDb(store).query<{ id: number; redeemed_by: number; redeemed_at: number }, []>("SELECT id, redeemed_by, redeemed_at FROM redemption_codes").get()!;
    expect(used).toEqual({ id: row.code_id!, redeemed_by: user, redeemed_at: clock.now() });
    expect((await codes.batches())[0]!.redeemed).toBe(1);
  });

  test("a used code, an unknown code and an expired code credit nothing", async () => {
    const { codes, store, clock } = setup({ windowMs: 60_000, perUser: 100, perAddress: 100 });
    const [a, b] = [addUser(store, 0), addUser(store, 0)];
    const { codes: [once] } = await codes.createBatch({ name: "x", credits: 5, count: 1, expiresInDays: null, createdBy: "cli" });
    const { codes: [late] } = await codes.createBatch({ name: "y", credits: 5, count: 1, expiresInDays: 1, createdBy: "cli" });
    expect((await codes.redeem(a, once!, "ip")).ok).toBe(true);
    expect(await codes.redeem(a, once!, "ip")).toEqual({ ok: false, reason: "used" });
    expect(await codes.redeem(b, once!, "ip")).toEqual({ ok: false, reason: "used" });
    expect(await codes.redeem(b, generateCode(), "ip")).toEqual({ ok: false, reason: "unknown" });
    expect(await codes.redeem(b, "not a code", "ip")).toEqual({ ok: false, reason: "malformed" });
    clock.advance(86_400_000);
    expect(await codes.redeem(b, late!, "ip")).toEqual({ ok: false, reason: "expired" });
    expect([await store.credits.balance(a), await store.credits.balance(b)]).toEqual([5, 0]);
    expect(await store.credits.ledgerSum(b)).toBe(0);
  });

  test("the schema itself refuses a second ledger row for one code and a redeem row without a code", async () => {
    const { codes, store } = setup();
    const user = addUser(store, 0);
    const { codes: [code] } = await codes.createBatch({ name: "x", credits: 5, count: 1, expiresInDays: null, createdBy: "cli" });
    await codes.redeem(user, code!, "ip");
    const codeId = (await store.credits.ledger(user))[0]!.code_id!;
    const insert = (id: number | null) => rawDb(store).query("INSERT INTO ledger (user_id, kind, amount, code_id, created_at) VALUES (?, 'redeem', 5, ?, 0)").run(user, id);
    expect(() => insert(codeId)).toThrow(/UNIQUE/);
    expect(() => insert(null)).toThrow(/CHECK/);
  });

  test("failed attempts are throttled per user and per address; a throttled attempt never reaches the store, even with a good code", async () => {
    const { codes, store, clock } = setup({ windowMs: 60_000, perUser: 3, perAddress: 5 });
    const [guesser, other, third] = [addUser(store, 0), addUser(store, 0), addUser(store, 0)];
    const { codes: good } = await codes.createBatch({ name: "x", credits: 5, count: 3, expiresInDays: null, createdBy: "cli" });
    for (let i = 0; i < 3; i++) expect((await codes.redeem(guesser, generateCode(), "1.1.1.1")).ok).toBe(false);
    const throttled = await codes.redeem(guesser, good[0]!, "2.2.2.2");
    expect(throttled).toMatchObject({ ok: false, reason: "throttled" });
    expect(await store.credits.balance(guesser)).toBe(0);
    // Another user on the guesser's address has 2 attempts left there (5 per address).
    expect((await codes.redeem(other, "bad", "1.1.1.1")).ok).toBe(false);
    expect((await codes.redeem(other, good[1]!, "1.1.1.1")).ok).toBe(true);
    expect((await codes.redeem(third, "bad", "1.1.1.1")).ok).toBe(false);
    expect(await codes.redeem(third, good[2]!, "1.1.1.1")).toMatchObject({ ok: false, reason: "throttled" });
    // A success does not count; the window passes and the guesser may try again.
    clock.advance(60_001);
    expect(await codes.redeem(guesser, good[0]!, "1.1.1.1")).toMatchObject({ ok: true, credits: 5 });
  });
});
