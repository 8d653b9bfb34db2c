import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { addUser, createKey, KEY_CHANGE_CHECK_MS, KeyAuthenticator, verifyPassword } from "../../src/core/accounts";
import { fakeClock } from "../support/fakeClock";
import { ATELIER_FROM_SOURCE, runAtelier } from "../support/process";
import { generateApiKey, hashApiKey, KEY_PREFIX } from "../../src/core/apiKeys";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";

const dir = mkdtempSync(join(tmpdir(), "atelier-accounts-test-"));
const db = openDatabase(dir);
const store = createStore(db, latestVersion());
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("API keys", () => {
  test("sk-atl- plus 43 base62 characters; only the hash and a short prefix are stored", async () => {
    const user = await addUser(store, Date.now, { email: "keys@example.com" });
    const { key, row } = await createKey(store, Date.now, user.id, "laptop");
    expect(key.secret).toMatch(/^sk-atl-[0-9A-Za-z]{43}$/);
    expect(key.prefix).toBe(key.secret.slice(0, KEY_PREFIX.length + 8));
    expect(row.secret_hash).toBe(hashApiKey(key.secret));
    expect(row.secret_hash).toMatch(/^[0-9a-f]{64}$/);
    const dump = JSON.stringify(db.query("SELECT * FROM api_keys").all());
    expect(dump).not.toContain(key.secret);
    expect(dump).not.toContain(key.secret.slice(KEY_PREFIX.length + 8));
  });

  test("keys are distinct", () => {
    const seen = new Set(Array.from({ length: 200 }, () => generateApiKey().secret));
    expect(seen.size).toBe(200);
  });
});

describe("users", () => {
  test("passwords are stored as argon2id hashes", async () => {
    const user = await addUser(store, Date.now, { email: "pw@example.com", password: "correct horse battery" });
    expect(user.password_hash).toStartWith("$argon2id$");
    expect(await verifyPassword("correct horse battery", user.password_hash)).toBe(true);
    expect(await verifyPassword("wrong", user.password_hash)).toBe(false);
  });

  test("initial credits are a ledger grant", async () => {
    const user = await addUser(store, Date.now, { email: "credits@example.com", credits: 7 });
    const ledger = db.query<{ kind: string; amount: number }, [number]>("SELECT kind, amount FROM ledger WHERE user_id = ?").all(user.id);
    expect(ledger).toEqual([{ kind: "grant", amount: 7 }]);
    expect(await store.credits.balance(user.id)).toBe(7);
  });

  test("invalid emails are refused", async () => {
    await expect(addUser(store, Date.now, { email: "not-an-email" })).rejects.toThrow(/valid email/);
  });
});

describe("KeyAuthenticator", () => {
  test("writes last_used_at at most once a minute per key", async () => {
    const user = await addUser(store, Date.now, { email: "touch@example.com" });
    const { key, row } = await createKey(store, Date.now, user.id, "t");
    let now = 1_000_000;
    const auth = new KeyAuthenticator(store, () => now);
    const lastUsed = async () => (await store.keys.byPrefix(row.prefix))!.last_used_at;

    expect(await lastUsed()).toBeNull();
    expect((await auth.lookup(key.secret))?.user_id).toBe(user.id);
    expect(await lastUsed()).toBe(1_000_000);
    now += 30_000;
    await auth.lookup(key.secret);
    expect(await lastUsed()).toBe(1_000_000); // throttled: no write
    now += 30_001;
    await auth.lookup(key.secret);
    expect(await lastUsed()).toBe(1_060_001);
  });

  test("keeps found owners in memory: a second request with the key does not query the database", async () => {
    const user = await addUser(store, Date.now, { email: "cached@example.com" });
    const { key } = await createKey(store, Date.now, user.id, "t");
    const auth = new KeyAuthenticator(store, fakeClock().now);
    const queries = countCalls(store.keys, "ownerByHash");
    try {
      expect((await auth.lookup(key.secret))?.user_id).toBe(user.id);
      expect((await auth.lookup(key.secret))?.user_id).toBe(user.id);
      expect((await auth.lookup(key.secret))?.user_id).toBe(user.id);
      expect(queries.calls).toBe(1);
      // Unknown keys are never cached: each one is a lookup, and a key created later works at once.
      expect(await auth.lookup(`${key.secret}x`)).toBeNull();
      expect(await auth.lookup(`${key.secret}x`)).toBeNull();
      expect(queries.calls).toBe(3);
    } finally {
      queries.restore();
    }
  });

  test("a revocation or a disabled user in this process is refused on the very next lookup", async () => {
    const user = await addUser(store, Date.now, { email: "local-revoke@example.com" });
    const first = await createKey(store, Date.now, user.id, "a");
    const second = await createKey(store, Date.now, user.id, "b");
    const auth = new KeyAuthenticator(store, fakeClock().now);
    expect((await auth.lookup(first.key.secret))?.key_revoked_at).toBeNull();
    expect((await auth.lookup(second.key.secret))?.disabled).toBe(0);
    await store.keys.revoke(first.row.id, Date.now());
    expect((await auth.lookup(first.key.secret))?.key_revoked_at).not.toBeNull();
    await store.users.setDisabled(user.id, true);
    expect((await auth.lookup(second.key.secret))?.disabled).toBe(1);
    await store.users.setDisabled(user.id, false);
    expect((await auth.lookup(second.key.secret))?.disabled).toBe(0);
  });

  test("a CLI revocation in another process is refused within the change-check interval", async () => {
    const user = await addUser(store, Date.now, { email: "cli-revoke@example.com" });
    const { key, row } = await createKey(store, Date.now, user.id, "t");
    const clock = fakeClock();
    const auth = new KeyAuthenticator(store, clock.now);
    expect((await auth.lookup(key.secret))?.key_revoked_at).toBeNull();
    const cli = await runAtelier(ATELIER_FROM_SOURCE, ["key", "revoke", row.prefix, "--data", dir], { env: { ATELIER_CONFIG: "" } });
    expect(cli).toMatchObject({ code: 0 });
    // Inside the interval the cached owner may still answer (the bound the README states)…
    clock.advance(KEY_CHANGE_CHECK_MS - 1);
    await auth.lookup(key.secret);
    // …and once it has passed, the next lookup sees the revocation.
    clock.advance(1);
    expect((await auth.lookup(key.secret))?.key_revoked_at).not.toBeNull();
  });

  test("a user disabled through another connection is refused within the change-check interval", async () => {
    const user = await addUser(store, Date.now, { email: "other-disable@example.com" });
    const { key } = await createKey(store, Date.now, user.id, "t");
    const clock = fakeClock();
    const auth = new KeyAuthenticator(store, clock.now);
    expect((await auth.lookup(key.secret))?.disabled).toBe(0);
    const other = createStore(openDatabase(dir), latestVersion());
    await other.users.setDisabled(user.id, true);
    await other.close();
    clock.advance(KEY_CHANGE_CHECK_MS);
    expect((await auth.lookup(key.secret))?.disabled).toBe(1);
  });
});

describe("KeyAuthenticator's change check", () => {
  test("lookups that arrive while the shared revision is being read wait for that one read; a failed read is not trusted", async () => {
    const user = await addUser(store, Date.now, { email: "single-read@example.com" });
    const { key } = await createKey(store, Date.now, user.id, "t");
    const clock = fakeClock();
    const auth = new KeyAuthenticator(store, clock.now);
    expect((await auth.lookup(key.secret))?.user_id).toBe(user.id);
    const real = store.keys.externalRevision.bind(store.keys);
    let reads = 0;
    let answer!: (fail: boolean) => void;
    store.keys.externalRevision = () => {
      reads++;
      return new Promise<number>((resolve, reject) => {
        answer = (fail) => (fail ? reject(new Error("the database is gone")) : real().then(resolve, reject));
      });
    };
    const owners = countCalls(store.keys, "ownerByHash");
    try {
      clock.advance(KEY_CHANGE_CHECK_MS);
      const waiting = [auth.lookup(key.secret), auth.lookup(key.secret), auth.lookup(key.secret)];
      await Bun.sleep(1);
      expect(reads).toBe(1);
      answer(false);
      expect((await Promise.all(waiting)).map((o) => o?.user_id)).toEqual([user.id, user.id, user.id]);
      expect(owners.calls).toBe(0); // the revision did not move: answered from memory
      // A read that fails fails the lookups waiting on it, empties the cache, and the next lookup reads again.
      clock.advance(KEY_CHANGE_CHECK_MS);
      const failing = auth.lookup(key.secret);
      await Bun.sleep(1);
      answer(true);
      await expect(failing).rejects.toThrow("the database is gone");
      const again = auth.lookup(key.secret);
      await Bun.sleep(1);
      expect(reads).toBe(3);
      answer(false);
      expect((await again)?.user_id).toBe(user.id);
      expect(owners.calls).toBe(1);
    } finally {
      owners.restore();
      store.keys.externalRevision = real;
    }
  });
});

/** Counts calls to one method of an object (the call still happens); restore() puts it back. */
function countCalls<T extends object>(target: T, method: keyof T & string): { readonly calls: number; restore(): void } {
  const slot = target as unknown as Record<string, (...args: unknown[]) => unknown>;
  const original = slot[method]!;
  let calls = 0;
  slot[method] = (...args: unknown[]) => {
    calls++;
    return original.apply(target, args);
  };
  return {
    get calls() {
      return calls;
    },
    restore: () => {
      slot[method] = original;
    },
  };
}
