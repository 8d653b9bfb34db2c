/**
 * The credit ledger on the real SQLite store in memory: every balance change is one
 * transaction with its ledger row, a charge happens once per request, a refund at most once
 * whoever asks (the request path, a second call, a recovery at startup), the balance never
 * goes below zero and the ledger always sums to it.
 */
import { afterAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createStore, type Store } from "../../src/store";
import { InsufficientCreditsError, KeyCreditCapReached, type FailedOutcome, type ImageCharge } from "../../src/core/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { fakeClock } from "../support/fakeClock";
import { addUser, memoryStore, rawDb, trackRawDb } from "../support/memoryStore";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const FAILED: FailedOutcome = { status: "failed", errorCode: "upstream_failed", errorMessage: "the upstream failed", queueMs: 3, generationMs: 40 };

function charge(requestId: string, userId: number): ImageCharge {
  return { requestId, userId, keyId: null, kind: "generate", model: "test-image", price: 1, prompt: "a red square" };
}

function setup(credits = 3) {
  const clock = fakeClock();
  const store = memoryStore();
  const user = addUser(store, credits, clock.now());
  return { store, user, clock };
}

function ledgerOf(store: Store, requestId: string) {
  return rawDb(store)
    .query<{ kind: string; amount: number }, [string]>("SELECT kind, amount FROM ledger WHERE request_id = ? ORDER BY id")
    .all(requestId);
}

/** Balance, ledger sum and row counts: what must not move when an operation is refused. */
async function snapshot(store: Store, user: number) {
  const count = (table: string) => rawDb(store).query<{ n: number }, []>(`SELECT COUNT(*) AS n FROM ${table}`).get()!.n;
  return { balance: await store.credits.balance(user), sum: await store.credits.ledgerSum(user), ledger: count("ledger"), requests: count("requests") };
}

describe("charge", () => {
  test("takes exactly 1 credit with one ledger row and a pending request, at the clock's time", async () => {
    const { store, user, clock } = setup(3);
    clock.advance(500);
    expect(await store.credits.chargeForImage(charge("r1", user), clock.now())).toBe(2);
    expect(await store.credits.balance(user)).toBe(2);
    expect(ledgerOf(store, "r1")).toEqual([{ kind: "charge", amount: -1 }]);
    expect(await store.requests.get("r1")).toMatchObject({ status: "pending", credits_charged: 1, credits_refunded: 0, created_at: clock.now(), user_id: user });
    expect(await store.credits.ledgerSum(user)).toBe(2);
  });

  test("a second charge for the same request id fails and changes nothing", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    const before = await snapshot(store, user);
    await expect(store.credits.chargeForImage(charge("r1", user), clock.now())).rejects.toThrow(/UNIQUE/);
    expect(await snapshot(store, user)).toEqual(before);
    expect(ledgerOf(store, "r1")).toEqual([{ kind: "charge", amount: -1 }]);
  });

  test("at zero credits: InsufficientCreditsError, and no request, no ledger row, no negative balance", async () => {
    const { store, user, clock } = setup(1);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    const before = await snapshot(store, user);
    await expect(store.credits.chargeForImage(charge("r2", user), clock.now())).rejects.toThrow(InsufficientCreditsError);
    expect(await snapshot(store, user)).toEqual({ ...before, balance: 0 });
    expect(await store.requests.get("r2")).toBeNull();
  });

  test("the schema refuses a negative balance, a second charge or refund row, and refunding more than was charged", async () => {
    const { store, user, clock } = setup(1);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    expect(() => rawDb(store).query("UPDATE users SET credits = credits - 1 WHERE id = ?").run(user)).toThrow(/CHECK/);
    const insert = (kind: string, amount: number) =>
      rawDb(store).query("INSERT INTO ledger (user_id, kind, amount, request_id, created_at) VALUES (?, ?, ?, 'r1', 0)").run(user, kind, amount);
    expect(() => insert("charge", -1)).toThrow(/UNIQUE/);
    insert("refund", 1);
    expect(() => insert("refund", 1)).toThrow(/UNIQUE/);
    expect(() => insert("charge", 1)).toThrow(/CHECK/); // signs are fixed by kind
    expect(() => rawDb(store).query("UPDATE requests SET credits_refunded = 2 WHERE id = 'r1'").run()).toThrow(/CHECK/);
  });
});

describe("refundOnce", () => {
  test("returns the credit once, with one refund row; a second call changes nothing", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    clock.advance(1200);
    expect(await store.credits.refundOnce("r1", FAILED, clock.now())).toBe(true);
    const after = await snapshot(store, user);
    expect(after.balance).toBe(3);
    expect(await store.requests.get("r1")).toMatchObject({
      status: "failed",
      credits_refunded: 1,
      error_code: "upstream_failed",
      queue_ms: 3,
      generation_ms: 40,
      finished_at: clock.now(),
    });
    clock.advance(10);
    expect(await store.credits.refundOnce("r1", { ...FAILED, errorCode: "other" }, clock.now())).toBe(false);
    expect(await snapshot(store, user)).toEqual(after);
    expect(await store.requests.get("r1")).toMatchObject({ error_code: "upstream_failed", finished_at: clock.now() - 10 });
    expect(ledgerOf(store, "r1")).toEqual([
      { kind: "charge", amount: -1 },
      { kind: "refund", amount: 1 },
    ]);
  });

  test("the failure's detail (admins only) is written with the refund, and only by the call that refunded", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    expect((await store.requests.get("r1"))?.error_detail).toBeNull();
    expect(await store.credits.refundOnce("r1", { ...FAILED, errorDetail: "upstream 'a': could not reach the upstream: ECONNREFUSED" }, clock.now())).toBe(true);
    expect(await store.requests.get("r1")).toMatchObject({ status: "failed", credits_refunded: 1, error_detail: "upstream 'a': could not reach the upstream: ECONNREFUSED" });
    expect(await store.credits.refundOnce("r1", { ...FAILED, errorDetail: "a later, different detail" }, clock.now())).toBe(false);
    expect((await store.requests.get("r1"))?.error_detail).toBe("upstream 'a': could not reach the upstream: ECONNREFUSED");
    // Without a detail (a validation failure, an interruption) the column stays empty.
    await store.credits.chargeForImage(charge("r2", user), clock.now());
    expect(await store.credits.refundOnce("r2", FAILED, clock.now())).toBe(true);
    expect((await store.requests.get("r2"))?.error_detail).toBeNull();
  });

  test("an unknown request or one that succeeded is not refunded", async () => {
    const { store, user, clock } = setup(3);
    expect(await store.credits.refundOnce("nope", FAILED, clock.now())).toBe(false);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    expect(await store.requests.markSucceeded("r1", { queueMs: 0, generationMs: 10 }, clock.now())).toBe(true);
    const before = await snapshot(store, user);
    expect(await store.credits.refundOnce("r1", FAILED, clock.now())).toBe(false);
    expect(await snapshot(store, user)).toEqual(before);
    expect((await store.requests.get("r1"))?.status).toBe("succeeded");
  });

  test("a success recorded after the refund changes nothing (the request stays failed, the credit returned)", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    await store.credits.refundOnce("r1", FAILED, clock.now());
    expect(await store.requests.markSucceeded("r1", { queueMs: 0, generationMs: 10 }, clock.now())).toBe(false);
    expect((await store.requests.get("r1"))?.status).toBe("failed");
    expect(await store.credits.balance(user)).toBe(3);
  });

  test("a refund that fails midway (after the status change) rolls back whole: it can still happen once", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    // A refund row already there (by hand) makes the ledger insert fail after the UPDATEs ran.
    rawDb(store).exec("DROP INDEX ledger_once_per_request");
    rawDb(store).exec("CREATE UNIQUE INDEX ledger_once_per_request ON ledger(request_id) WHERE request_id IS NOT NULL");
    const before = await snapshot(store, user);
    await expect(store.credits.refundOnce("r1", FAILED, clock.now())).rejects.toThrow(/UNIQUE/);
    expect(await snapshot(store, user)).toEqual(before);
    expect(await store.requests.get("r1")).toMatchObject({ status: "pending", credits_refunded: 0 });
    rawDb(store).exec("DROP INDEX ledger_once_per_request");
    expect(await store.credits.refundOnce("r1", FAILED, clock.now())).toBe(true);
    expect(await store.credits.balance(user)).toBe(3);
  });
});

describe("recoverInterrupted", () => {
  test("refunds every pending request once, marks it interrupted, and leaves finished ones alone", async () => {
    const { store, user, clock } = setup(5);
    for (const id of ["pending1", "pending2", "ok", "failed"]) (await store.credits.chargeForImage(charge(id, user), clock.now()));
    await store.requests.markSucceeded("ok", { queueMs: 0, generationMs: 1 }, clock.now());
    await store.credits.refundOnce("failed", FAILED, clock.now());
    expect(await store.credits.balance(user)).toBe(2);
    clock.advance(60_000);
    expect((await store.credits.recoverInterrupted(clock.now())).sort()).toEqual(["pending1", "pending2"]);
    expect(await store.credits.balance(user)).toBe(4);
    expect(await store.requests.get("pending1")).toMatchObject({ status: "interrupted", error_code: "interrupted", credits_refunded: 1, finished_at: clock.now() });
    expect(await store.requests.get("ok")).toMatchObject({ status: "succeeded", credits_refunded: 0 });
    expect(await store.requests.get("failed")).toMatchObject({ status: "failed", error_code: "upstream_failed" });
    // Running it again (a second restart) refunds nothing.
    expect(await store.credits.recoverInterrupted(clock.now())).toEqual([]);
    expect(await store.credits.balance(user)).toBe(4);
    expect(await store.credits.ledgerSum(user)).toBe(4);
  });

  test("refund, then recovery: no second refund", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    expect(await store.credits.refundOnce("r1", FAILED, clock.now())).toBe(true);
    expect(await store.credits.recoverInterrupted(clock.now())).toEqual([]);
    expect(await store.credits.balance(user)).toBe(3);
    expect((await store.requests.get("r1"))?.status).toBe("failed");
    expect(ledgerOf(store, "r1").filter((r) => r.kind === "refund")).toHaveLength(1);
  });

  test("recovery, then the request's own refund: no second refund", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    expect(await store.credits.recoverInterrupted(clock.now())).toEqual(["r1"]);
    expect(await store.credits.refundOnce("r1", FAILED, clock.now())).toBe(false);
    expect(await store.credits.balance(user)).toBe(3);
    expect((await store.requests.get("r1"))?.status).toBe("interrupted");
    expect(ledgerOf(store, "r1").filter((r) => r.kind === "refund")).toHaveLength(1);
  });

  test("a refund landing between the recovery's scan and its refund: refunded once, by whoever came first", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    await store.credits.chargeForImage(charge("r2", user), clock.now());
    // The recovery has read the pending ids; before it refunds r1, the request path refunds r1.
    const credits = store.credits;
    const original = credits.refundOnce.bind(credits);
    let raced = false;
    credits.refundOnce = async (id, failure, now) => {
      if (id === "r1" && !raced) {
        raced = true;
        expect(await original("r1", FAILED, now)).toBe(true);
      }
      return original(id, failure, now);
    };
    expect(await credits.recoverInterrupted(clock.now())).toEqual(["r2"]);
    expect(raced).toBe(true);
    expect((await store.requests.get("r1"))?.status).toBe("failed");
    expect((await store.requests.get("r2"))?.status).toBe("interrupted");
    expect(await credits.balance(user)).toBe(3);
    expect(await credits.ledgerSum(user)).toBe(3);
    for (const id of ["r1", "r2"]) expect(ledgerOf(store, id).filter((r) => r.kind === "refund")).toHaveLength(1);
  });

  test("two connections to one database file (a server and a restarting one) refund once between them", async () => {
    const dir = mkdtempSync(join(tmpdir(), "atelier-credits-"));
    dirs.push(dir);
    const a = createStore(openDatabase(dir), latestVersion());
    const b = createStore(openDatabase(dir), latestVersion());
    try {
      const user = addUser(a, 2);
      await a.credits.chargeForImage(charge("r1", user), 1);
      await a.credits.chargeForImage(charge("r2", user), 1);
      expect(await b.credits.recoverInterrupted(2)).toEqual(["r1", "r2"]);
      expect(await a.credits.refundOnce("r1", FAILED, 3)).toBe(false);
      expect(await a.credits.refundOnce("r2", FAILED, 3)).toBe(false);
      expect(await a.credits.balance(user)).toBe(2);
      expect(await b.credits.ledgerSum(user)).toBe(2);
    } finally {
      await a.close();
      await b.close();
    }
  });
});

/** A key of `user` that may spend `cap` credits in all. */
async function cappedKey(store: Store, user: number, cap: number): Promise<number> {
  const key = await store.keys.create({ userId: user, name: "capped", prefix: `sk-atl-${user}cap`, secretHash: `hash-${user}-${cap}`, limits: { expiresAt: null, creditCap: cap, allowedModels: null } }, 1);
  return key.id;
}

/** Two stores on one database file, as two server instances would be (no busy wait: writes retry through whenWritable). */
function twoInstances(): [Store, Store] {
  const dir = mkdtempSync(join(tmpdir(), "atelier-credits-"));
  dirs.push(dir);
  const open = () => {
    const db = openDatabase(dir);
    return trackRawDb(createStore(db, latestVersion()), db);
  };
  const [a, b] = [open(), open()];
  a.setBusyTimeout(0);
  b.setBusyTimeout(0);
  return [a, b];
}

describe("concurrent money moves through the async SQL client", () => {
  test("two charges at once at the key's cap − 1: exactly one is charged, the other is refused with nothing written", async () => {
    const { store, user, clock } = setup(10);
    const keyId = await cappedKey(store, user, 2);
    await store.credits.chargeForImage({ ...charge("r0", user), keyId }, clock.now());
    const results = await Promise.allSettled(["r1", "r2"].map((id) => store.credits.chargeForImage({ ...charge(id, user), keyId }, clock.now())));
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    const refused = results.filter((r) => r.status === "rejected");
    expect(refused).toHaveLength(1);
    expect((refused[0] as PromiseRejectedResult).reason).toBeInstanceOf(KeyCreditCapReached);
    expect(await store.credits.balance(user)).toBe(8);
    expect(await store.credits.ledgerSum(user)).toBe(8);
    expect(await store.requests.count({ keyId })).toBe(2);
  });

  test("the same race between two connections to one file (two instances): one charge, and the loser retried until it saw the cap", async () => {
    const [a, b] = twoInstances();
    try {
      const user = addUser(a, 10);
      const keyId = await cappedKey(a, user, 2);
      await a.credits.chargeForImage({ ...charge("r0", user), keyId }, 1);
      const attempt = (s: Store, id: string) => s.whenWritable(() => s.credits.chargeForImage({ ...charge(id, user), keyId }, 2), { maxWaitMs: 5000 });
      const results = await Promise.allSettled([attempt(a, "r1"), attempt(b, "r2"), attempt(a, "r3"), attempt(b, "r4")]);
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      for (const r of results) if (r.status === "rejected") expect(r.reason).toBeInstanceOf(KeyCreditCapReached);
      expect(await b.credits.balance(user)).toBe(8);
      expect(await b.credits.ledgerSum(user)).toBe(8);
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("concurrent refunds of one request (the request path, a cancel, a recovery): one refund row, the credit back once", async () => {
    const { store, user, clock } = setup(3);
    await store.credits.chargeForImage(charge("r1", user), clock.now());
    const refunds = await Promise.all([
      store.credits.refundOnce("r1", FAILED, clock.now()),
      store.credits.refundOnce("r1", { ...FAILED, errorCode: "canceled" }, clock.now()),
      store.credits.recoverInterrupted(clock.now()).then((ids) => ids.includes("r1")),
      store.credits.refundOnce("r1", FAILED, clock.now()),
    ]);
    expect(refunds.filter(Boolean)).toHaveLength(1);
    expect(await store.credits.balance(user)).toBe(3);
    expect(ledgerOf(store, "r1")).toEqual([
      { kind: "charge", amount: -1 },
      { kind: "refund", amount: 1 },
    ]);
  });

  test("concurrent refunds of one request from two connections: refunded once between them", async () => {
    const [a, b] = twoInstances();
    try {
      const user = addUser(a, 3);
      await a.credits.chargeForImage(charge("r1", user), 1);
      const refund = (s: Store) => s.whenWritable(() => s.credits.refundOnce("r1", FAILED, 2), { maxWaitMs: 5000 });
      const refunds = await Promise.all([refund(a), refund(b), refund(a), refund(b)]);
      expect(refunds.filter(Boolean)).toHaveLength(1);
      expect(await b.credits.balance(user)).toBe(3);
      expect(ledgerOf(a, "r1")).toEqual([
        { kind: "charge", amount: -1 },
        { kind: "refund", amount: 1 },
      ]);
    } finally {
      await a.close();
      await b.close();
    }
  });
});

describe("grant and deduct", () => {
  test("grant adds with one ledger row carrying note and actor; only positive integers", async () => {
    const { store, user, clock } = setup(0);
    expect(await store.credits.grant(user, 5, clock.now(), "top-up", "admin@example.test")).toBe(5);
    expect((await store.credits.ledger(user))[0]).toMatchObject({ kind: "grant", amount: 5, note: "top-up", actor: "admin@example.test", request_id: null });
    const before = await snapshot(store, user);
    for (const bad of [0, -1, 1.5, Number.NaN]) await expect(store.credits.grant(user, bad, clock.now())).rejects.toThrow(RangeError);
    await expect(store.credits.grant(9999, 1, clock.now())).rejects.toThrow(RangeError);
    expect(await snapshot(store, user)).toEqual(before);
  });

  test("deduct removes with a negative ledger row, never below zero", async () => {
    const { store, user, clock } = setup(3);
    expect(await store.credits.deduct(user, 2, clock.now(), "correction")).toBe(1);
    expect((await store.credits.ledger(user))[0]).toMatchObject({ kind: "deduct", amount: -2, note: "correction" });
    const before = await snapshot(store, user);
    await expect(store.credits.deduct(user, 2, clock.now())).rejects.toThrow(InsufficientCreditsError);
    for (const bad of [0, -1, 0.5]) await expect(store.credits.deduct(user, bad, clock.now())).rejects.toThrow(RangeError);
    expect(await snapshot(store, user)).toEqual(before);
    expect(await store.credits.deduct(user, 1, clock.now())).toBe(0);
  });

  test("ledger pages newest first", async () => {
    const { store, user, clock } = setup(0);
    for (let i = 1; i <= 5; i++) (await store.credits.grant(user, i, clock.advance(1)));
    expect((await store.credits.ledger(user, 2)).map((r) => r.amount)).toEqual([5, 4]);
    expect((await store.credits.ledger(user, 2, 2)).map((r) => r.amount)).toEqual([3, 2]);
  });
});

describe("property: any sequence of operations", () => {
  type Op =
    | { t: "grant" | "deduct"; user: number; amount: number }
    | { t: "charge"; user: number; req: number }
    | { t: "refund" | "succeed"; req: number }
    | { t: "recover" };

  const user = fc.integer({ min: 0, max: 1 });
  const req = fc.integer({ min: 0, max: 7 });
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ t: fc.constantFrom("grant" as const, "deduct" as const), user, amount: fc.integer({ min: 1, max: 4 }) }),
    fc.record({ t: fc.constant("charge" as const), user, req }),
    fc.record({ t: fc.constant("charge" as const), user, req }),
    fc.record({ t: fc.constantFrom("refund" as const, "succeed" as const), req }),
    fc.record({ t: fc.constant("recover" as const) }),
  );

  test("the balance matches a model, never goes negative, and the ledger always sums to it; each request is charged once and refunded at most once", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 2, maxLength: 2 }), fc.array(op, { maxLength: 50 }), async (initial, ops) => {
        const clock = fakeClock();
        const store = memoryStore();
        try {
          const users = initial.map((c) => addUser(store, c, clock.now()));
          const balance = [...initial];
          const requests = new Map<string, { owner: number; status: "pending" | "succeeded" | "failed" | "interrupted" }>();
          for (const o of ops) {
            clock.advance(1);
            if (o.t === "grant") {
              expect(await store.credits.grant(users[o.user]!, o.amount, clock.now())).toBe((balance[o.user]! += o.amount));
            } else if (o.t === "deduct") {
              if (balance[o.user]! >= o.amount) expect(await store.credits.deduct(users[o.user]!, o.amount, clock.now())).toBe((balance[o.user]! -= o.amount));
              else await expect(store.credits.deduct(users[o.user]!, o.amount, clock.now())).rejects.toThrow(InsufficientCreditsError);
            } else if (o.t === "charge") {
              const id = `r${o.req}`;
              const attempt = () => store.credits.chargeForImage(charge(id, users[o.user]!), clock.now());
              if (requests.has(id)) await expect(attempt()).rejects.toThrow();
              else if (balance[o.user]! < 1) await expect(attempt()).rejects.toThrow(InsufficientCreditsError);
              else {
                expect(await attempt()).toBe(--balance[o.user]!);
                requests.set(id, { owner: o.user, status: "pending" });
              }
            } else if (o.t === "refund" || o.t === "succeed") {
              const id = `r${o.req}`;
              const r = requests.get(id);
              const pending = r?.status === "pending";
              const done = o.t === "refund" ? await store.credits.refundOnce(id, FAILED, clock.now()) : await store.requests.markSucceeded(id, { queueMs: 0, generationMs: 1 }, clock.now());
              expect(done).toBe(pending);
              if (pending && o.t === "refund") {
                r.status = "failed";
                balance[r.owner]!++;
              } else if (pending) r.status = "succeeded";
            } else {
              const expected = [...requests].filter(([, r]) => r.status === "pending").map(([id]) => id);
              expect((await store.credits.recoverInterrupted(clock.now())).sort()).toEqual(expected.sort());
              for (const id of expected) {
                const r = requests.get(id)!;
                r.status = "interrupted";
                balance[r.owner]!++;
              }
            }
            for (const [i, u] of users.entries()) {
              expect(await store.credits.balance(u)).toBe(balance[i]!);
              expect(await store.credits.ledgerSum(u)).toBe(balance[i]!);
              expect(balance[i]!).toBeGreaterThanOrEqual(0);
            }
          }
          for (const [id, r] of requests) {
            const refunded = r.status === "failed" || r.status === "interrupted" ? 1 : 0;
            expect(ledgerOf(store, id)).toEqual([{ kind: "charge", amount: -1 }, ...(refunded ? [{ kind: "refund", amount: 1 }] : [])]);
            expect(await store.requests.get(id)).toMatchObject({ status: r.status, user_id: users[r.owner], credits_charged: 1, credits_refunded: refunded });
          }
        } finally {
          await store.close();
        }
      }),
      { numRuns: 200, seed: Number(process.env.FC_SEED ?? 20_260_110) },
    );
  }, 60_000); // 200 runs of up to 50 operations: seconds on a loaded two-core machine
});

describe("a model's price in the charge and the refund", () => {
  const priced = (requestId: string, userId: number, price: number): ImageCharge => ({ ...charge(requestId, userId), price });

  test("the charge takes the price in one ledger row; below it nothing is written", async () => {
    const { store, user, clock } = setup(5);
    expect(await store.credits.chargeForImage(priced("r1", user, 3), clock.now())).toBe(2);
    expect(await store.requests.get("r1")).toMatchObject({ status: "pending", credits_charged: 3 });
    const before = await snapshot(store, user);
    let thrown: unknown;
    try {
      await store.credits.chargeForImage(priced("r2", user, 3), clock.now());
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(InsufficientCreditsError);
    expect((thrown as InsufficientCreditsError).cost).toEqual({ price: 3, balance: 2 });
    expect(await snapshot(store, user)).toEqual(before);
  });

  test("the refund and the crash recovery return what the request row says was charged, once", async () => {
    const { store, user, clock } = setup(5);
    await store.credits.chargeForImage(priced("r1", user, 2), clock.now());
    await store.credits.chargeForImage(priced("r2", user, 3), clock.now());
    expect(await store.credits.balance(user)).toBe(0);
    expect(await store.credits.refundOnce("r1", FAILED, clock.now())).toBe(true);
    expect(await store.credits.refundOnce("r1", FAILED, clock.now())).toBe(false);
    expect(await store.credits.recoverInterrupted(clock.now())).toEqual(["r2"]);
    expect(ledgerOf(store, "r1")).toEqual([{ kind: "charge", amount: -2 }, { kind: "refund", amount: 2 }]);
    expect(ledgerOf(store, "r2")).toEqual([{ kind: "charge", amount: -3 }, { kind: "refund", amount: 3 }]);
    expect(await store.credits.balance(user)).toBe(5);
    expect(await store.credits.ledgerSum(user)).toBe(5);
  });

  test("a price that is not a non-negative integer is refused before anything is written", async () => {
    const { store, user, clock } = setup(5);
    const before = await snapshot(store, user);
    for (const bad of [-1, 1.5, Number.NaN]) await expect(store.credits.chargeForImage(priced(`r${bad}`, user, bad), clock.now())).rejects.toThrow(RangeError);
    expect(await snapshot(store, user)).toEqual(before);
  });
});
