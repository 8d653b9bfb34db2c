/**
 * One code redeemed at the same moment by several processes on one database file (what
 * concurrent requests to several servers, or a server and the CLI, amount to): exactly one
 * redemption credits, the others see "used", and every balance still equals its ledger.
 */
import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { RedemptionCodes } from "../../src/core/redemptionCodes";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { tempDir } from "../support/tempDirs";

const dir = tempDir("atelier-redeem-race-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("a code redeemed by four processes at once credits exactly once", async () => {
  const store = createStore(openDatabase(dir), latestVersion());
  const users = await Promise.all([1, 2, 3, 4].map(async (i) => (await store.users.create({ email: `racer${i}@example.test`, passwordHash: null, role: "user", credits: 0 }, Date.now())).id));
  const { codes: [code] } = await new RedemptionCodes(store.redemptions, Date.now).createBatch({ name: "race", credits: 7, count: 1, expiresInDays: null, createdBy: "test" });
  // Started together after every process has had time to load and open the database.
  const startAt = Date.now() + 1500;
  const procs = users.map((u) =>
    Bun.spawn([process.execPath, join(import.meta.dir, "../support/redeemInProcess.ts"), dir, String(u), code!, String(startAt)], { stdout: "pipe", stderr: "pipe" }),
  );
  const outcomes = await Promise.all(
    procs.map(async (p) => {
      const [out, err, exit] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
      expect({ exit, err }).toEqual({ exit: 0, err: "" });
      return JSON.parse(out) as { ok: boolean; reason?: string };
    }),
  );
  expect(outcomes.filter((o) => o.ok)).toHaveLength(1);
  expect(outcomes.filter((o) => !o.ok).map((o) => o.reason)).toEqual(["used", "used", "used"]);
  const balances = await Promise.all(users.map((u) => store.credits.balance(u)));
  expect(balances.reduce((a, b) => a! + b!, 0)).toBe(7);
  for (const u of users) expect(await store.credits.ledgerSum(u)).toBe((await store.credits.balance(u))!);
  expect(await store.credits.ledgerMismatches()).toBe(0);
  await store.close();
}, 30_000);
