/**
 * The image archive's rows, webhooks and the usage report give the same answers on SQLite and on
 * PostgreSQL (store/images.ts, webhooks.ts, usage.ts are written once): one scenario runs on a
 * fresh in-memory SQLite and on a fresh migrated PostgreSQL (test/support/postgresServer), and
 * every answer is compared, besides the answers both must give. Then what only several
 * instances can do: two pools claiming due webhook deliveries at once never take the same one,
 * and two racing for the image-link secret agree on one.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { latestVersion, openDatabase } from "../../src/store/database";
import { ImageRecords } from "../../src/store/images";
import { ServerSecretStore } from "../../src/store/serverSecrets";
import { RequestStore } from "../../src/store/requests";
import { SqliteClient, type PostgresClient, type SqlClient } from "../../src/store/sql";
import { UsageStore } from "../../src/store/usage";
import { WebhookStore } from "../../src/store/webhooks";
import { usageRange } from "../../src/core/usage";
import type { ArchivedImage } from "../../src/core/imageArchive";
import type { NewDelivery } from "../../src/core/webhooksStore";
import { startPostgres, type TestPostgres } from "../support/postgresServer";

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 20, 15, 0, 0);
const MIDNIGHT = Date.UTC(2026, 10, 20);

let pg: TestPostgres;

beforeAll(async () => {
  pg = await startPostgres({ migrated: true });
});
afterAll(async () => {
  await pg?.stop();
});

function sqlite(): SqlClient {
  const db = openDatabase(":memory:");
  void latestVersion;
  return new SqliteClient(db);
}

/** Users 1-3, two keys of user 1 (their prefixes sort differently by code unit and by a locale), and a history. */
async function seed(sql: SqlClient): Promise<void> {
  for (const email of ["a@example.test", "b@example.test", "c@example.test"]) {
    await sql.run("INSERT INTO users (email, password_hash, role, credits, created_at) VALUES (?, NULL, 'user', 0, 0)", [email]);
  }
  await sql.run("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (1, 'Zeta', 'sk-Zz', 'h1', 0), (1, 'alpha', 'sk-aa', 'h2', 0)");
  const history: [string, number, number | null, string, string, string, number, number, number][] = [
    ["r1", 1, 1, "image", "m/B", "succeeded", 2, 0, NOW - 2 * DAY],
    ["r2", 1, 2, "image", "m/a", "failed", 1, 1, NOW - 2 * DAY + 1],
    ["r3", 1, null, "chat", "m/a", "succeeded", 0, 0, NOW - DAY],
    ["r4", 1, 2, "image", "m/B", "interrupted", 3, 3, NOW],
    ["r5", 1, 1, "image", "m/a", "succeeded", 1, 0, NOW + 1000],
    ["r6", 2, null, "image", "m/a", "succeeded", 1, 0, NOW],
    ["r7", 1, 1, "image", "m/a", "succeeded", 1, 0, MIDNIGHT - 1], // the last millisecond of the 19th
    ["r8", 1, 1, "image", "m/a", "succeeded", 1, 0, MIDNIGHT], // the first of the 20th
  ];
  // Chat rows are written the one way the server writes them, in the store's batch (which also counts them in chat_usage).
  const chats = new RequestStore(sql);
  for (const r of history) {
    const [id, userId, keyId, kind, model, status, , , createdAt] = r;
    if (kind === "chat") chats.recordChat({ id, userId, keyId, model, status: status as "succeeded", generationMs: 0 }, createdAt);
    else {
      await sql.run(
        "INSERT INTO requests (id, user_id, key_id, kind, model, status, credits_charged, credits_refunded, created_at, endpoint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'generations')",
        r,
      );
    }
  }
  await chats.stopChats();
}

const image = (id: string, userId: number, bytes: number, createdAt: number, content: string, requestId: string): ArchivedImage => ({
  id,
  requestId,
  userId,
  mime: "image/png",
  bytes,
  width: 8,
  height: 8,
  sha256: content.repeat(64),
  createdAt,
  expiresAt: null,
});

const delivery = (eventId: string, source: NewDelivery["source"], url: string): NewDelivery => ({ eventId, userId: 1, eventType: "image.task.succeeded", source, url, payload: "{}" });

/** Every answer of the scenario, by name. */
async function scenario(sql: SqlClient): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  await seed(sql);

  const usage = new UsageStore(sql);
  const range = usageRange({}, NOW, 30);
  for (const by of ["day", "model", "key"] as const) out[`usage by ${by}`] = await usage.usage(1, range, by);
  for (const by of ["model", "key"] as const) out[`daily by ${by}`] = await usage.usageDaily(1, range, by);

  const images = new ImageRecords(sql);
  await images.insert(image("img_1", 1, 100, NOW - 3000, "a", "r1"));
  await images.insert(image("img_2", 1, 200, NOW - 2000, "b", "r1"));
  await images.insert(image("img_3", 1, 300, NOW - 1000, "a", "r5"));
  await images.insert(image("img_4", 2, 400, NOW, "c", "r6"));
  out.get = await images.get("img_2");
  out.listForUser = await images.listForUser(1, NOW, 10, 0);
  out.secondPage = await images.listForUser(1, NOW, 2, 2);
  out.countForUser = await images.countForUser(1, NOW);
  out.getForUser = await images.getForUser("img_3", 1, NOW);
  out.getForOtherUser = await images.getForUser("img_3", 2, NOW);
  out.imageIdsForRequests = [...(await images.imageIdsForRequests(1, ["r1", "r2", "r5"], NOW))];
  out.usageByUser = [...(await images.usageByUser())];
  out.contents = await images.contents("", 10);
  out.expireOverBudget = await images.expireOverBudget(700, NOW);
  out.expired = await images.expired(NOW, 10);
  out.remove = await images.remove(["img_1", "img_2"]);
  out.referenced = [await images.referenced("a".repeat(64)), await images.referenced("b".repeat(64))];
  out.removeContent = await images.removeContent("c".repeat(64));

  const hooks = new WebhookStore(sql);
  await hooks.setEndpointUrl(1, "https://a.example/hook", NOW);
  await hooks.rotateSecret(1, "v1.sealed", NOW, null);
  out.endpoint = await hooks.endpoint(1);
  out.enqueue = await hooks.enqueue([delivery("e1", "endpoint", "https://a.example/hook"), delivery("e1", "request", "https://b.example/own"), delivery("e2", "endpoint", "https://a.example/hook")], NOW);
  out.enqueueAgain = await hooks.enqueue([delivery("e1", "endpoint", "https://a.example/hook")], NOW);
  await hooks.setEndpointUrl(1, "https://b.example/own", NOW + 1);
  out.afterMove = (await hooks.recentDeliveries(1, 10)).map((r) => [r.event_id, r.source, r.url, r.state]);
  out.nextDue = await hooks.nextDue();
  const claimed = await hooks.claimDue(NOW + 10, 2, NOW + 50_000);
  out.claimed = claimed.map((r) => r.event_id).sort();
  out.claimedAgain = (await hooks.claimDue(NOW + 10, 10, NOW + 50_000)).map((r) => r.event_id);
  const [first, second] = claimed.sort((x, y) => x.id - y.id);
  await hooks.recordAttempt(first!.id, { at: NOW + 20, status: 200, error: null, durationMs: 12.4 }, { state: "delivered" });
  await hooks.recordAttempt(second!.id, { at: NOW + 20, status: 500, error: "HTTP 500", durationMs: 3 }, { state: "pending", nextAttemptAt: NOW + 5000 });
  out.attemptsOf = (await hooks.attemptsOf([first!.id, second!.id])).map((a) => [a.status, a.error, a.duration_ms]);
  await hooks.setEndpointUrl(1, null, NOW + 30);
  out.afterClear = (await hooks.recentDeliveries(1, 10)).map((r) => [r.event_id, r.source, r.state, r.last_error, r.attempts, r.finished_at]);
  out.pruneFinished = await hooks.pruneFinished(NOW + 10_000_000);
  return out;
}

describe("the same answers on SQLite and PostgreSQL", () => {
  let onSqlite: Record<string, unknown>;
  let onPostgres: Record<string, unknown>;
  let client: PostgresClient;

  beforeAll(async () => {
    const lite = sqlite();
    onSqlite = await scenario(lite);
    await lite.close();
    client = pg.client();
    onPostgres = await scenario(client);
  });

  test("every answer is equal, name by name", () => {
    expect(Object.keys(onPostgres)).toEqual(Object.keys(onSqlite));
    for (const name of Object.keys(onSqlite)) expect({ name, answer: onPostgres[name] }).toEqual({ name, answer: onSqlite[name] });
  });

  test("usage: UTC days split at midnight, counts and credits as numbers, groups in code-unit order", () => {
    const days = onPostgres["usage by day"] as { group: string; requests: number; images: number; credits_spent: number }[];
    expect(days.map((d) => [d.group, d.requests, d.images, d.credits_spent])).toEqual([
      ["2026-11-18", 2, 1, 2],
      ["2026-11-19", 2, 1, 1],
      ["2026-11-20", 3, 2, 2],
    ]);
    expect((onPostgres["usage by model"] as { group: string }[]).map((r) => r.group)).toEqual(["m/B", "m/a"]);
    expect((onPostgres["usage by key"] as { group: string; label: string }[]).map((r) => [r.group, r.label])).toEqual([
      ["sk-Zz", "Zeta"],
      ["sk-aa", "alpha"],
      ["workbench", "Workbench (signed in)"],
    ]);
    const daily = onPostgres["daily by model"] as { day: string; group: string; failed: number }[];
    expect(daily.map((r) => [r.day, r.group, r.failed])).toEqual([
      ["2026-11-18", "m/B", 0],
      ["2026-11-18", "m/a", 1],
      ["2026-11-19", "m/a", 0],
      ["2026-11-20", "m/B", 1],
      ["2026-11-20", "m/a", 0],
    ]);
  });

  test("images: the oldest past the budget expire, and only content no row references is given back", () => {
    expect(onPostgres.countForUser).toBe(3);
    expect(onPostgres.usageByUser).toEqual([
      [1, { userId: 1, images: 3, bytes: 600 }],
      [2, { userId: 2, images: 1, bytes: 400 }],
    ]);
    // 400 + 300 fit in 700; img_2 and img_1 (older) do not.
    expect(onPostgres.expireOverBudget).toBe(2);
    expect((onPostgres.expired as ArchivedImage[]).map((i) => i.id).sort()).toEqual(["img_1", "img_2"]);
    expect(onPostgres.remove).toEqual([{ sha256: "b".repeat(64), mime: "image/png" }]);
    expect(onPostgres.referenced).toEqual([true, false]);
    expect(onPostgres.getForOtherUser).toBeNull();
  });

  test("webhooks: a repeated event is ignored, pending deliveries follow the endpoint unless already covered, a claim is a lease", () => {
    expect([onPostgres.enqueue, onPostgres.enqueueAgain]).toEqual([3, 0]);
    expect(onPostgres.afterMove).toEqual([
      ["e2", "endpoint", "https://b.example/own", "pending"],
      ["e1", "request", "https://b.example/own", "pending"],
      ["e1", "endpoint", "https://a.example/hook", "pending"],
    ]);
    expect((onPostgres.claimed as string[]).length).toBe(2);
    expect((onPostgres.claimedAgain as string[]).length).toBe(1);
    expect(onPostgres.pruneFinished).toBe(2);
  });
});

describe("several instances on one PostgreSQL", () => {
  test("two pools claiming at once never take the same delivery, and no claim takes more than its limit", async () => {
    // A database of its own: nothing else is due in it.
    const own = await startPostgres({ migrated: true });
    const a = own.client();
    const b = own.client();
    await a.run("INSERT INTO users (email, password_hash, role, credits, created_at) VALUES ('claims@example.test', NULL, 'user', 0, 0)");
    const userId = (await a.get<{ id: number }>("SELECT id FROM users WHERE email = 'claims@example.test'"))!.id;
    const N = 120;
    const hooksA = new WebhookStore(a);
    const hooksB = new WebhookStore(b);
    await hooksA.enqueue(
      Array.from({ length: N }, (_, i) => ({ ...delivery(`claim${i}`, "test", "https://x.example/"), userId })),
      NOW,
    );
    const times = new Map<number, number>();
    let rounds = 0;
    for (; rounds < N; rounds++) {
      const claims = await Promise.all([hooksA.claimDue(NOW, 7, NOW + 60_000), hooksB.claimDue(NOW, 7, NOW + 60_000), hooksA.claimDue(NOW, 5, NOW + 60_000), hooksB.claimDue(NOW, 5, NOW + 60_000)]);
      for (const [i, rows] of claims.entries()) expect(rows.length).toBeLessThanOrEqual(i < 2 ? 7 : 5);
      const all = claims.flat();
      if (all.length === 0) break;
      for (const r of all) times.set(r.id, (times.get(r.id) ?? 0) + 1);
    }
    expect(times.size).toBe(N);
    expect([...times.values()].every((n) => n === 1)).toBe(true);
    expect(rounds).toBeGreaterThanOrEqual(Math.ceil(N / 24));
    // Leased into the future: nothing is due until the lease runs out, then everything is.
    expect(await hooksA.claimDue(NOW + 59_999, 500, NOW + 120_000)).toEqual([]);
    expect((await hooksB.claimDue(NOW + 60_000, 500, NOW + 120_000)).length).toBe(N);
    await own.stop();
  });

  test("two pools asking for the same server secret at once agree on one", async () => {
    const [x, y] = await Promise.all([new ServerSecretStore(pg.client()).getOrCreate("race", NOW), new ServerSecretStore(pg.client()).getOrCreate("race", NOW)]);
    expect(x.length).toBe(32);
    expect(Buffer.from(x).equals(Buffer.from(y))).toBe(true);
  });
});
