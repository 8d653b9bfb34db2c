import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { addUser, createKey, KeyAuthenticator, verifyPassword } from "../../src/core/accounts";
import { generateApiKey, hashApiKey, KEY_PREFIX } from "../../src/core/apiKeys";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";

const dir = mkdtempSync(join(tmpdir(), "atelier-accounts-test-"));
const db = openDatabase(dir);
const store = createStore(db, latestVersion());
afterAll(() => {
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("API keys", () => {
  test("sk-atl- plus 43 base62 characters; only the hash and a short prefix are stored", async () => {
    const user = await addUser(store, Date.now, { email: "keys@example.com" });
    const { key, row } = createKey(store, Date.now, user.id, "laptop");
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
    expect(store.credits.balance(user.id)).toBe(7);
  });

  test("invalid emails are refused", async () => {
    await expect(addUser(store, Date.now, { email: "not-an-email" })).rejects.toThrow(/valid email/);
  });
});

describe("KeyAuthenticator", () => {
  test("writes last_used_at at most once a minute per key", async () => {
    const user = await addUser(store, Date.now, { email: "touch@example.com" });
    const { key, row } = createKey(store, Date.now, user.id, "t");
    let now = 1_000_000;
    const auth = new KeyAuthenticator(store, () => now);
    const lastUsed = () => store.keys.byPrefix(row.prefix)!.last_used_at;

    expect(lastUsed()).toBeNull();
    expect(auth.lookup(key.secret)?.user_id).toBe(user.id);
    expect(lastUsed()).toBe(1_000_000);
    now += 30_000;
    auth.lookup(key.secret);
    expect(lastUsed()).toBe(1_000_000); // throttled: no write
    now += 30_001;
    auth.lookup(key.secret);
    expect(lastUsed()).toBe(1_060_001);
  });

  test("sees a revocation made through another connection at once", async () => {
    const user = await addUser(store, Date.now, { email: "revoke@example.com" });
    const { key, row } = createKey(store, Date.now, user.id, "t");
    const auth = new KeyAuthenticator(store, Date.now);
    expect(auth.lookup(key.secret)?.key_revoked_at).toBeNull();
    const other = createStore(openDatabase(dir), latestVersion());
    other.keys.revoke(row.id, Date.now());
    other.close();
    expect(auth.lookup(key.secret)?.key_revoked_at).not.toBeNull();
    expect(auth.lookup(`${key.secret}x`)).toBeNull();
  });
});
