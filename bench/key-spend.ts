/**
 * What a long chat history costs the reads that sum spend, before and after migration 15, side by
 * side in one run (SQLite files in a temp dir, as in data_dir):
 * - an image charge for a key with a credit cap (the real CreditStore.chargeForImage, which sums
 *   the key's spend inside its write transaction: every other write of the server waits for it);
 * - the admin's user list's spend of one user (RequestStore.spentByUsers).
 *
 *   bun bench/key-spend.ts [chat rows=1000000] [charges=200]
 *
 * Both databases hold the same rows: `chat rows` chat requests of the key (what a busy chat client
 * leaves in a few days) and a few image requests. The baseline is the schema at migration 14 (the
 * key's spend index had a row for every chat request, the user's spend read the user's whole
 * history); this tree's is the latest. Prints the median and p99 of each, and checks that both
 * schemas give the same spend.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { createStore, type Store } from "../src/store";
import { latestVersion, openDatabase } from "../src/store/database";
import { migrations } from "../src/store/migrations";
import { median } from "./support/chatBench";

const chatRows = Math.max(1, Math.min(5_000_000, Number(process.argv[2] ?? 1_000_000)));
const charges = Math.max(10, Math.min(10_000, Number(process.argv[3] ?? 200)));
const IMAGE_ROWS = 20;

/** A database at `version` with one user, one capped key, its chat rows and a few image rows. */
function seeded(dir: string, version: number): Database {
  const db = openDatabase(dir, migrations.filter((m) => m.version <= version));
  db.run("INSERT INTO users (email, password_hash, credits, created_at) VALUES ('spend@example.com', NULL, ?, 0)", [charges + 1000]);
  db.run("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at, credit_cap) VALUES (1, 'capped', 'sk-atl-spnd', 'h', 0, ?)", [charges + 1000]);
  // Time-ordered ids and times, as the server writes them.
  db.run(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
     INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, prompt, created_at, finished_at)
     SELECT printf('req_%012d', i), 1, 1, 'chat', '/v1/chat/completions', 'mock-chat', 'succeeded', 'Rewrite: Red kettle 1.7L stainless', 1700000000000 + i, 1700000000000 + i FROM n`,
    [chatRows],
  );
  for (let i = 0; i < IMAGE_ROWS; i++) {
    db.run("INSERT INTO requests (id, user_id, key_id, kind, endpoint, model, status, credits_charged, created_at) VALUES (?, 1, 1, 'image', '/v1/images/generations', 'm', 'succeeded', 1, ?)", [
      `req_img_${i}`, 1800000000000 + i,
    ]);
  }
  return db;
}

interface Figures {
  chargeMs: number[];
  userSpendMs: number[];
  spent: number;
}

async function measure(store: Store): Promise<Figures> {
  const chargeMs: number[] = [];
  const userSpendMs: number[] = [];
  for (let i = 0; i < charges; i++) {
    const started = performance.now();
    await store.credits.chargeForImage({ requestId: `req_bench_${i}`, userId: 1, keyId: 1, kind: "generate", model: "m", price: 1, prompt: "p" }, 1900000000000 + i);
    chargeMs.push(performance.now() - started);
  }
  for (let i = 0; i < Math.min(charges, 50); i++) {
    const started = performance.now();
    await store.requests.spentByUsers([1]);
    userSpendMs.push(performance.now() - started);
  }
  return { chargeMs, userSpendMs, spent: await store.keys.spent(1) };
}

const p99 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))]!;
const dir = mkdtempSync(join(tmpdir(), "atelier-key-spend-"));
try {
  const results: [string, Figures][] = [];
  for (const [name, version] of [["migration 14 (before)", 14], [`migration ${latestVersion()} (this tree)`, latestVersion()]] as const) {
    const db = seeded(join(dir, String(version)), version);
    db.close();
    // Opened as the server opens it (the latest binary would migrate the old file: keep it at its version).
    const store = createStore(openDatabase(join(dir, String(version)), migrations.filter((m) => m.version <= version)), version);
    results.push([name, await measure(store)]);
    await store.close();
  }
  console.log(`${chatRows} chat rows and ${IMAGE_ROWS} image rows on one capped key; ${charges} image charges, each its own transaction:`);
  console.log("schema                      charge p50 ms  charge p99 ms  user spend p50 ms  key spent");
  for (const [name, f] of results) {
    console.log(`${name.padEnd(28)}${median(f.chargeMs).toFixed(3).padStart(13)}${p99(f.chargeMs).toFixed(3).padStart(15)}${median(f.userSpendMs).toFixed(3).padStart(19)}${String(f.spent).padStart(11)}`);
  }
  const [before, after] = results.map(([, f]) => f);
  if (before!.spent !== after!.spent || after!.spent !== IMAGE_ROWS + charges) throw new Error(`the spends differ: ${before!.spent} and ${after!.spent}, expected ${IMAGE_ROWS + charges}`);
  console.log(`charge: ${(median(before!.chargeMs) / median(after!.chargeMs)).toFixed(0)}× faster; user spend: ${(median(before!.userSpendMs) / median(after!.userSpendMs)).toFixed(0)}× faster; spends equal (checked)`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
