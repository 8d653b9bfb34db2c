/**
 * The accounts store modules (users, API keys, sessions, redemption codes, the shared revision)
 * run the same statements on SQLite and on a real PostgreSQL: each case below runs on both. On
 * PostgreSQL two pools on one database stand for two instances: a revocation through one is
 * refused by the other's key authenticator within the change-check interval, and ten
 * redemptions of one code racing through a pool credit it once.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { KEY_CHANGE_CHECK_MS, KeyAuthenticator, createKey } from "../../src/core/accounts";
import { hashSessionId } from "../../src/core/sessions";
import { RedemptionCodes } from "../../src/core/redemptionCodes";
import { EmailTakenError, type AccountStore, type UserRow } from "../../src/core/store";
import { ApiKeyStore, KEY_SPEND_SQL } from "../../src/store/apiKeys";
import { RedemptionCodeStore } from "../../src/store/redemptionCodes";
import { Revisions } from "../../src/store/revisions";
import { SessionStore } from "../../src/store/sessions";
import type { SqlClient } from "../../src/store/sql";
import { UserStore } from "../../src/store/users";
import { fakeClock } from "../support/fakeClock";
import { bothEngines } from "../support/bothEngines";

/** The accounts modules of one instance on one SQL client. */
function accounts(sql: SqlClient) {
  const revisions = new Revisions(sql);
  return { sql, revisions, users: new UserStore(sql, revisions), keys: new ApiKeyStore(sql, revisions), sessions: new SessionStore(sql), redemptions: new RedemptionCodeStore(sql) };
}
type Accounts = ReturnType<typeof accounts>;

const ledgerSum = async (sql: SqlClient, userId: number) =>
  (await sql.get<{ n: number }>("SELECT COALESCE(CAST(SUM(amount) AS BIGINT), 0) AS n FROM ledger WHERE user_id = ?", [userId]))!.n;


for (const engine of bothEngines()) {
  describe(`accounts on ${engine.name}`, () => {
    let a: Accounts;
    let b: Accounts;
    beforeAll(async () => {
      const opened = await engine.open();
      a = accounts(opened.a);
      b = accounts(opened.b);
    });
    afterAll(() => engine.stop());

    test("a user's initial credits are a grant in the ledger; emails are one account whatever their case, and found in any case", async () => {
      const user = await a.users.create({ email: "Ada@Example.com", passwordHash: null, role: "user", credits: 7, actor: "test" }, 1_000);
      expect(user).toMatchObject({ email: "Ada@Example.com", credits: 7, role: "user", disabled: 0, created_at: 1_000 });
      expect(typeof user.id).toBe("number");
      expect(await ledgerSum(a.sql, user.id)).toBe(7);
      await expect(a.users.create({ email: "ada@example.COM", passwordHash: null, role: "user", credits: 3 }, 1_001)).rejects.toThrow(EmailTakenError);
      // The refused create wrote nothing: no second user, no second grant.
      expect(await ledgerSum(a.sql, user.id)).toBe(7);
      expect((await a.sql.get<{ n: number }>("SELECT COUNT(*) AS n FROM users"))!.n).toBe(1);
      expect((await a.users.byEmail("ADA@EXAMPLE.COM"))?.id).toBe(user.id);
      expect(await a.users.byEmail("bob@example.com")).toBeNull();
      expect((await a.users.byId(user.id))?.email).toBe("Ada@Example.com");
    });

    test("the user list searches any case, treats % and _ as text, and a negative limit lists everyone", async () => {
      for (const email of ["percent%sign@example.com", "under_score@example.com", "UPPER@example.com"]) {
        await a.users.create({ email, passwordHash: null, role: "user", credits: 0 }, 2_000);
      }
      expect((await a.users.list({ search: "upper" })).map((u) => u.email)).toEqual(["UPPER@example.com"]);
      expect((await a.users.list({ search: "%" })).map((u) => u.email)).toEqual(["percent%sign@example.com"]);
      expect((await a.users.list({ search: "r_s" })).map((u) => u.email)).toEqual(["under_score@example.com"]);
      const all = await a.users.list({ limit: -1 });
      expect(all.length).toBeGreaterThanOrEqual(4);
      expect(all.map((u) => u.id)).toEqual([...all.map((u) => u.id)].sort((x, y) => x - y));
      expect(await a.users.list({ limit: 1, offset: 1 })).toEqual([all[1]!]);
    });

    test("roles, disabled flags and passwords change one row and move the shared revision in the same transaction; a miss moves nothing", async () => {
      const user = await a.users.create({ email: "flags@example.com", passwordHash: null, role: "user", credits: 0 }, 3_000);
      const admins = await a.users.countAdmins();
      const before = await b.revisions.shared();
      expect(await a.users.setRole(user.id, "admin")).toBe(true);
      expect(await a.users.countAdmins()).toBe(admins + 1);
      expect(await a.users.setDisabled(user.id, true)).toBe(true);
      expect(await a.users.setPasswordHash(user.id, "$argon2id$x")).toBe(true);
      expect(await b.revisions.shared()).toBe(before + 3);
      expect(await b.users.byId(user.id)).toMatchObject({ role: "admin", disabled: 1, password_hash: "$argon2id$x" });
      expect(await a.users.setDisabled(999_999, true)).toBe(false);
      expect(await b.revisions.shared()).toBe(before + 3);
    });

    test("keys: stored by hash, found with their owner, listed with their spend (charged minus refunded), revoked once", async () => {
      const user = await a.users.create({ email: "keys@example.com", passwordHash: null, role: "user", credits: 10 }, 4_000);
      const store: AccountStore = { users: a.users, keys: a.keys };
      const { key, row } = await createKey(store, () => 4_001, user.id, "laptop", { expiresAt: 9_999_999, creditCap: 5, allowedModels: ["builtin-image"] });
      const owner = await a.keys.ownerByHash(row.secret_hash);
      expect(owner).toMatchObject({ key_id: row.id, key_prefix: key.prefix, user_id: user.id, email: "keys@example.com", key_credit_cap: 5, key_expires_at: 9_999_999, disabled: 0 });
      expect(JSON.parse(owner!.key_allowed_models!)).toEqual(["builtin-image"]);
      expect(await a.keys.spent(row.id)).toBe(0);
      const request = (id: string, charged: number, refunded: number) =>
        a.sql.run("INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, credits_refunded, created_at) VALUES (?, ?, ?, 'image', 'generations', 'm', 'failed', ?, ?, ?)", [
          id,
          user.id,
          row.id,
          charged,
          refunded,
          4_002,
        ]);
      await request("r1", 2, 0);
      await request("r2", 3, 3);
      await request("r3", 1, 0);
      expect(await a.keys.spent(row.id)).toBe(3);
      const listed = await a.keys.listWithSpend(user.id);
      expect(listed.map((k) => [k.id, k.credits_spent])).toEqual([[row.id, 3]]);
      expect(typeof listed[0]!.credits_spent).toBe("number");
      expect(await a.keys.prefixesOf([row.id, 424_242])).toEqual(new Map([[row.id, key.prefix]]));
      expect((await a.keys.byPrefix(key.prefix))?.id).toBe(row.id);
      expect(await a.keys.touch(row.id, 4_100)).toBe(true);
      expect((await a.keys.listForUser(user.id))[0]!.last_used_at).toBe(4_100);
      // Settings of another user's key, or of a revoked key, are not changed.
      expect(await a.keys.updateSettings(row.id, user.id + 1, { name: "x", expiresAt: null, creditCap: null, allowedModels: null })).toBe(false);
      expect(await a.keys.updateSettings(row.id, user.id, { name: "desk", expiresAt: null, creditCap: null, allowedModels: null })).toBe(true);
      expect(await a.keys.revoke(row.id, 4_200, user.id + 1)).toBe(false);
      expect(await a.keys.revoke(row.id, 4_200, user.id)).toBe(true);
      expect(await a.keys.revoke(row.id, 4_300)).toBe(false);
      expect(await a.keys.updateSettings(row.id, user.id, { name: "late", expiresAt: null, creditCap: null, allowedModels: null })).toBe(false);
      expect(await b.keys.ownerByHash(row.secret_hash)).toMatchObject({ key_name: "desk", key_revoked_at: 4_200, key_credit_cap: null });
    });

    test("a key's and a user's spend are sums of image rows read from their partial indexes: chat rows are neither summed nor indexed", async () => {
      const user = await a.users.create({ email: "spend-index@example.com", passwordHash: null, role: "user", credits: 10 }, 4_500);
      const { row } = await createKey({ users: a.users, keys: a.keys }, () => 4_501, user.id, "capped", { expiresAt: null, creditCap: 5, allowedModels: null });
      const insert = (id: string, kind: "image" | "chat", charged: number) =>
        a.sql.run("INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, created_at) VALUES (?, ?, ?, ?, 'e', 'm', 'succeeded', ?, ?)", [
          id, user.id, row.id, kind, charged, 4_502,
        ]);
      await insert("spend-i1", "image", 2);
      for (let i = 0; i < 5; i++) await insert(`spend-c${i}`, "chat", 0);
      expect(await a.keys.spent(row.id)).toBe(2);
      const plans = await a.sql.transaction(async (tx) => {
        // A few rows: PostgreSQL's planner would rather scan the table; told not to, it shows which index answers.
        if (engine.name === "PostgreSQL") await tx.run("SET LOCAL enable_seqscan = off");
        const explain = async (sql: string, args: number[]) => {
          const rows = await tx.all<Record<string, string>>(`EXPLAIN ${engine.name === "SQLite" ? "QUERY PLAN " : ""}${sql}`, args);
          return rows.map((r) => r.detail ?? r["QUERY PLAN"]).join(" ");
        };
        return [
          await explain(KEY_SPEND_SQL, [row.id]),
          await explain("SELECT user_id, SUM(credits_charged - credits_refunded) FROM requests WHERE kind = 'image' AND user_id IN (?) GROUP BY user_id", [user.id]),
        ];
      });
      // Answered from an index of image rows only (SQLite picks the key's; PostgreSQL, on a table
      // this small, any of them: the spend indexes and the image rows' time indexes hold image
      // rows only), never from the user's whole history or every row's time index.
      for (const plan of plans) {
        expect(plan).toMatch(/requests_(key_spend|user_spend|user_image_time|image_time)/);
        expect(plan).not.toMatch(/requests_(user_)?time\b/);
      }
      if (engine.name === "SQLite") expect(plans).toEqual([expect.stringContaining("requests_key_spend"), expect.stringContaining("requests_user_spend")]);
    });

    test("a key revoked through another instance is refused by this one within the change-check interval, and answered from memory until then", async () => {
      const user = await a.users.create({ email: "other-instance@example.com", passwordHash: null, role: "user", credits: 0 }, 5_000);
      const { key, row } = await createKey({ users: a.users, keys: a.keys }, () => 5_001, user.id, "t");
      const clock = fakeClock();
      const auth = new KeyAuthenticator({ users: a.users, keys: a.keys }, clock.now);
      let reads = 0;
      const readShared = a.keys.externalRevision.bind(a.keys);
      a.keys.externalRevision = () => (reads++, readShared());
      try {
        expect((await auth.lookup(key.secret))?.key_revoked_at).toBeNull();
        expect(await b.keys.revoke(row.id, 5_002)).toBe(true);
        // Inside the interval: the cached owner answers, and no lookup reads the revision again.
        clock.advance(KEY_CHANGE_CHECK_MS - 1);
        for (let i = 0; i < 5; i++) expect((await auth.lookup(key.secret))?.key_revoked_at).toBeNull();
        expect(reads).toBe(1);
        clock.advance(1);
        expect((await auth.lookup(key.secret))?.key_revoked_at).toBe(5_002);
        expect(reads).toBe(2);
      } finally {
        a.keys.externalRevision = readShared;
      }
    });

    test("sessions: found with their user until they expire; ended one by one or all of a user's at once", async () => {
      const user = await a.users.create({ email: "sessions@example.com", passwordHash: null, role: "user", credits: 0 }, 6_000);
      const row = (id: string, expiresAt: number) => ({ id_hash: hashSessionId(id), user_id: user.id, csrf_token: `csrf-${id}`, created_at: 6_000, expires_at: expiresAt });
      await a.sessions.create(row("one", 10_000));
      await a.sessions.create(row("two", 10_000));
      await a.sessions.create(row("old", 6_500));
      expect(await b.sessions.find(hashSessionId("one"), 7_000)).toMatchObject({ csrf_token: "csrf-one", user: { id: user.id, email: "sessions@example.com" } });
      expect(await a.sessions.find(hashSessionId("old"), 7_000)).toBeNull();
      expect(await a.sessions.deleteExpired(7_000)).toBe(1);
      await a.sessions.delete(hashSessionId("one"));
      expect(await a.sessions.find(hashSessionId("one"), 7_000)).toBeNull();
      expect(await a.sessions.find(hashSessionId("two"), 7_000)).not.toBeNull();
      await a.sessions.deleteForUser(user.id);
      expect(await a.sessions.find(hashSessionId("two"), 7_000)).toBeNull();
    });

    test("a code redeemed ten times at once credits once, with its ledger row; a batch of 1,200 codes is stored in one transaction", async () => {
      const users: UserRow[] = [];
      for (let i = 0; i < 10; i++) users.push(await a.users.create({ email: `racer${i}@example.com`, passwordHash: null, role: "user", credits: 0 }, 8_000));
      const codes = new RedemptionCodes(a.redemptions, () => 8_001, { windowMs: 60_000, perUser: 100, perAddress: 100 });
      const others = new RedemptionCodes(b.redemptions, () => 8_001, { windowMs: 60_000, perUser: 100, perAddress: 100 });
      const { codes: [code] } = await codes.createBatch({ name: "race", credits: 9, count: 1, expiresInDays: null, createdBy: "test" });
      const outcomes = await Promise.all(users.map((u, i) => (i % 2 ? others : codes).redeem(u.id, code!, `ip${i}`)));
      expect(outcomes.filter((o) => o.ok)).toEqual([{ ok: true, credits: 9, balance: 9, batchName: "race" }]);
      expect(outcomes.filter((o) => !o.ok)).toEqual(Array.from({ length: 9 }, () => ({ ok: false, reason: "used" })));
      const credited = (await a.sql.all<{ user_id: number; amount: number }>("SELECT user_id, amount FROM ledger WHERE kind = 'redeem'")).filter((r) => users.some((u) => u.id === r.user_id));
      expect(credited).toHaveLength(1);
      expect(credited[0]!.amount).toBe(9);
      const winner = credited[0]!.user_id;
      expect((await a.users.byId(winner))!.credits).toBe(await ledgerSum(a.sql, winner));

      const big = await codes.createBatch({ name: "big", credits: 1, count: 1_200, expiresInDays: 1, createdBy: "test" });
      expect(big.batch.code_count).toBe(1_200);
      const listed = await codes.batches();
      expect(listed.map((x) => [x.name, x.code_count, x.redeemed])).toEqual([["big", 1_200, 0], ["race", 1, 1]]);
    });
  });
}
