/**
 * Several `atelier serve` PROCESSES behind one client (scale-out, issue 14). The client spreads
 * 300 image requests from five users (four open at once each) over three instances, against a
 * loopback OpenAI-compatible fake that answers slowly (20-400 ms), fails some requests (500s and
 * 400s), and records how many requests are in its hands at once, in total and per user. One
 * instance is SIGKILLed while the fake holds one of its generations; the other two keep serving.
 * - The gates are shared through one real redis-server: the fake never holds more than
 *   generation_concurrency requests at once, nor more than per_user_concurrency of one user's,
 *   and the load reaches both limits.
 * - Every credit is accounted for at the end: no request pending, each image request one charge
 *   row and either succeeded with no refund or failed/interrupted with exactly one refund row,
 *   every balance equal to its ledger and to what the user started with minus their succeeded
 *   requests.
 * Run twice: each instance on its own SQLite store (the victim refunds its interrupted requests
 * itself when it starts again), then all three on ONE PostgreSQL database with a short heartbeat
 * and lease (a live instance refunds the dead one's generations once its lease runs out, and the
 * global ledger adds up). Scaled-only: redis-server and PostgreSQL are started here, loopback only.
 */
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../src/store/database";
import { SqliteClient, type SqlClient } from "../../src/store/sql";
import { makePng } from "../support/images";
import { ATELIER_FROM_SOURCE, lastLine, runAtelier, startServerProcess, type ServerProcess } from "../support/process";
import { startPostgres, type TestPostgres } from "../support/postgresServer";
import { startRedis, type TestRedis } from "../support/redisServer";

const GLOBAL = 4;
const PER_USER = 2;
const USERS = 5;
const REQUESTS_PER_USER = 60; // 300 in all
const CLIENT_PER_USER = 4; // each user keeps this many requests open at once: more than PER_USER
const START_CREDITS = 1000;
const HEARTBEAT_MS = 300;
// Thirteen heartbeats: a live instance whose beats stall on a loaded two-core machine (three
// servers, PostgreSQL, Redis and the clients on it) is not taken for dead.
const LEASE_MS = 4000;

const png = Buffer.from(makePng(16, 16)).toString("base64");

/** The fake upstream: every instance calls it with its own API key, so it knows who sent what. */
function startFake() {
  let inFlight = 0;
  let maxInFlight = 0;
  const perUser = new Map<string, number>();
  const maxPerUser = new Map<string, number>();
  const inFlightFrom = new Map<string, number>();
  let held: string | null = null; // requests from this instance hang until their connection closes
  let served = 0;
  let n = 0;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(request) {
      const instance = (request.headers.get("authorization") ?? "").replace("Bearer ", "");
      const body = (await request.json()) as { prompt: string };
      const user = /^user(\d+) /.exec(body.prompt)?.[1] ?? "?";
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      perUser.set(user, (perUser.get(user) ?? 0) + 1);
      maxPerUser.set(user, Math.max(maxPerUser.get(user) ?? 0, perUser.get(user)!));
      inFlightFrom.set(instance, (inFlightFrom.get(instance) ?? 0) + 1);
      let done = false;
      const leave = () => {
        if (done) return;
        done = true;
        inFlight--;
        perUser.set(user, perUser.get(user)! - 1);
        inFlightFrom.set(instance, inFlightFrom.get(instance)! - 1);
      };
      if (held === instance) {
        // Mid-generation when its instance dies: the connection closing ends it.
        return new Promise<Response>((resolve) => {
          request.signal.addEventListener("abort", () => {
            leave();
            resolve(new Response(null, { status: 499 }));
          });
        });
      }
      const k = n++;
      // Slow answers: 20 ms to 400 ms; faults: one in six fails with a 500, one in eleven with a 400.
      await Bun.sleep(20 + ((k * 37) % 380));
      leave();
      if (k % 6 === 5) return Response.json({ error: { message: "the fake upstream failed", type: "server_error" } }, { status: 500 });
      if (k % 11 === 10) return Response.json({ error: { message: "the fake upstream refused the prompt", type: "invalid_request_error" } }, { status: 400 });
      served++;
      return Response.json({ created: Math.floor(Date.now() / 1000), data: [{ b64_json: png }] });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}/v1`,
    get maxInFlight() {
      return maxInFlight;
    },
    maxPerUser,
    inFlightFrom: (instance: string) => inFlightFrom.get(instance) ?? 0,
    reset() {
      maxInFlight = 0;
      maxPerUser.clear();
      served = 0;
    },
    hold(instance: string | null) {
      held = instance;
    },
    get served() {
      return served;
    },
    stop: () => server.stop(true),
  };
}

let pg: TestPostgres;
let redis: TestRedis;
let fake: ReturnType<typeof startFake>;
const dirs: string[] = [];

beforeAll(async () => {
  [pg, redis] = await Promise.all([startPostgres({ migrated: true }), startRedis()]);
  fake = startFake();
});

afterAll(async () => {
  fake?.stop();
  await redis?.stop();
  await pg?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Instance {
  name: string;
  dir: string;
  file: string;
  env: Record<string, string>;
}

/**
 * One instance's configuration: the shared Redis and limits, its own upstream key; with
 * `sharedStore`, the shared PostgreSQL and a short heartbeat and lease, else SQLite in its dir.
 */
function instanceConfig(name: string, sharedStore: boolean): Instance {
  const dir = mkdtempSync(join(tmpdir(), `atelier-multi-${name}-`));
  dirs.push(dir);
  const file = join(dir, "atelier.toml");
  writeFileSync(
    file,
    `
[limits]
generation_concurrency = ${GLOBAL}
per_user_concurrency = ${PER_USER}
queue_size = 64
queue_timeout_ms = 60000

[redis]
url = "${redis.url}"
key_prefix = "${sharedStore ? "shared" : "own"}:"
${sharedStore ? `\n[instance]\nid = "${name}"\nheartbeat_ms = ${HEARTBEAT_MS}\nlease_ms = ${LEASE_MS}\n` : ""}
[[upstreams]]
id = "fake"
kind = "openai"
base_url = "${fake.url}"
max_attempts = 1
[[upstreams.accounts]]
id = "only"
api_key = "${name}"
# Above the gate's global limit, so the gate (not the account) is what the fake sees binding.
max_concurrency = ${GLOBAL * 2}

[[models]]
id = "fake-image"
kind = "image"
upstream = "fake"
`,
  );
  return { name, dir, file, env: sharedStore ? { ATELIER_DATABASE_URL: pg.url } : {} };
}

async function cli(inst: Instance, args: string[]): Promise<string> {
  const r = await runAtelier(ATELIER_FROM_SOURCE, [...args, "--config", inst.file, "--data", inst.dir], { env: inst.env });
  if (r.code !== 0) throw new Error(`atelier ${args.join(" ")} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Users with keys in the store `inst` names; their keys' secrets, user by user. */
async function makeUsers(inst: Instance): Promise<string[]> {
  const keys: string[] = [];
  for (let u = 0; u < USERS; u++) {
    await cli(inst, ["user", "add", `user${u}@example.com`, "--credits", String(START_CREDITS)]);
    keys.push(lastLine(await cli(inst, ["key", "create", `user${u}@example.com`])));
  }
  return keys;
}

const serve = (inst: Instance) => startServerProcess(ATELIER_FROM_SOURCE, ["--config", inst.file, "--data", inst.dir, "--port", "0", "--host", "127.0.0.1"], { env: inst.env });

interface Outcome {
  user: number;
  instance: string;
  status: number | "connection";
}

const countPending = async (db: SqlClient) => (await db.get<{ n: number }>("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM requests WHERE status = 'pending'"))!.n;

/**
 * Every credit in one store accounted for: nothing pending, each image request one charge row
 * and (failed or interrupted) one refund row or (succeeded) none, each balance equal to its
 * ledger and to what the user started with minus their succeeded requests.
 */
async function checkLedger(db: SqlClient): Promise<{ succeeded: number; interrupted: number; requests: number }> {
  expect(await countPending(db)).toBe(0);
  const requests = await db.all<{ id: string; user_id: number; status: string; credits_charged: number; credits_refunded: number; charges: number; refunds: number; charged: number; refunded: number }>(
    `SELECT r.id, r.user_id, r.status, r.credits_charged, r.credits_refunded,
            CAST(SUM(CASE WHEN l.kind = 'charge' THEN 1 ELSE 0 END) AS BIGINT) AS charges,
            CAST(SUM(CASE WHEN l.kind = 'refund' THEN 1 ELSE 0 END) AS BIGINT) AS refunds,
            CAST(COALESCE(SUM(CASE WHEN l.kind = 'charge' THEN -l.amount ELSE 0 END), 0) AS BIGINT) AS charged,
            CAST(COALESCE(SUM(CASE WHEN l.kind = 'refund' THEN l.amount ELSE 0 END), 0) AS BIGINT) AS refunded
       FROM requests r LEFT JOIN ledger l ON l.request_id = r.id
      WHERE r.kind = 'image' GROUP BY r.id, r.user_id, r.status, r.credits_charged, r.credits_refunded`,
  );
  for (const r of requests) {
    const seen = { id: r.id, status: r.status, charges: r.charges, charged: r.charged, refunds: r.refunds, refunded: r.refunded };
    if (r.status === "succeeded") expect(seen).toEqual({ ...seen, charges: 1, charged: 1, refunds: 0, refunded: 0 });
    else {
      expect(["failed", "interrupted"]).toContain(r.status);
      expect(seen).toEqual({ ...seen, charges: 1, charged: 1, refunds: 1, refunded: 1 });
      expect(r.credits_refunded).toBe(r.credits_charged);
    }
  }
  const succeededByUser = new Map<number, number>();
  for (const r of requests) if (r.status === "succeeded") succeededByUser.set(r.user_id, (succeededByUser.get(r.user_id) ?? 0) + 1);
  const users = await db.all<{ id: number; email: string; credits: number; ledger: number }>(
    "SELECT u.id, u.email, u.credits, CAST(COALESCE(SUM(l.amount), 0) AS BIGINT) AS ledger FROM users u LEFT JOIN ledger l ON l.user_id = u.id GROUP BY u.id, u.email, u.credits",
  );
  expect(users).toHaveLength(USERS);
  for (const u of users) {
    expect({ email: u.email, credits: u.credits }).toEqual({ email: u.email, credits: u.ledger });
    expect({ email: u.email, credits: u.credits }).toEqual({ email: u.email, credits: START_CREDITS - (succeededByUser.get(u.id) ?? 0) });
  }
  return {
    succeeded: requests.filter((r) => r.status === "succeeded").length,
    interrupted: requests.filter((r) => r.status === "interrupted").length,
    requests: requests.length,
  };
}

/**
 * Three instances, the client's few hundred requests spread over them, the victim killed a
 * third of the way in while the fake holds one of its generations. Returns what the client saw.
 */
async function runLoad(instances: Instance[], keysOf: (instance: string) => string[], victim: string): Promise<{ outcomes: Outcome[]; killedAt: number }> {
  fake.reset();
  for (const inst of instances) servers.set(inst.name, await serve(inst));
  const names = instances.map((i) => i.name);
  const live = new Set(names);
  const outcomes: Outcome[] = [];
  const send = async (user: number, i: number): Promise<void> => {
    // Round-robin over the instances that are up; the victim gets requests until it dies.
    const choices = names.filter((n) => live.has(n));
    const instance = choices[(user + i) % choices.length]!;
    const status = await fetch(`${servers.get(instance)!.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${keysOf(instance)[user]}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "fake-image", prompt: `user${user} request ${i}`, response_format: "b64_json" }),
      signal: AbortSignal.timeout(60_000),
    }).then(
      async (r) => (await r.arrayBuffer(), r.status),
      () => "connection" as const,
    );
    outcomes.push({ user, instance, status });
  };
  const clients = Array.from({ length: USERS }, (_, user) =>
    Array.from({ length: CLIENT_PER_USER }, async (_, lane) => {
      for (let i = lane; i < REQUESTS_PER_USER; i += CLIENT_PER_USER) await send(user, i);
    }),
  ).flat();
  const kill = (async () => {
    while (outcomes.length < (USERS * REQUESTS_PER_USER) / 3) await Bun.sleep(20);
    fake.hold(victim);
    const until = Date.now() + 30_000;
    while (fake.inFlightFrom(victim) < 1 && Date.now() < until) await Bun.sleep(10);
    expect(fake.inFlightFrom(victim)).toBeGreaterThanOrEqual(1);
    live.delete(victim);
    const proc = servers.get(victim)!.proc;
    proc.kill(9);
    await proc.exited;
    return outcomes.length;
  })();
  await Promise.all([...clients, kill]);
  const killedAt = await kill;
  fake.hold(null);

  expect(outcomes).toHaveLength(USERS * REQUESTS_PER_USER);
  // The limits held across instances at the upstream, and the load was enough to reach them.
  expect(fake.maxInFlight).toBeLessThanOrEqual(GLOBAL);
  expect(fake.maxInFlight).toBe(GLOBAL);
  expect([...fake.maxPerUser.values()].every((m) => m <= PER_USER)).toBe(true);
  expect(Math.max(...fake.maxPerUser.values())).toBe(PER_USER);
  // The victim's requests in its hands failed at the connection; the others kept serving.
  expect(outcomes.some((o) => o.instance === victim && o.status === "connection")).toBe(true);
  const after = outcomes.slice(killedAt).filter((o) => o.instance !== victim);
  expect(after.filter((o) => o.status === "connection")).toEqual([]);
  expect(after.filter((o) => o.status === 200).length).toBeGreaterThan(20);
  // 200, the upstream's 400 passed on (upstream_rejected), its 500 as 502; nothing else.
  for (const o of outcomes) expect([200, 400, 502, "connection"]).toContain(o.status);
  return { outcomes, killedAt };
}

const servers = new Map<string, ServerProcess>();

afterEach(async () => {
  for (const s of servers.values()) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill(9);
  await Promise.all([...servers.values()].map((s) => s.proc.exited));
  servers.clear();
});

test("three instances, each its own SQLite, sharing one Redis: the gates hold across them, a SIGKILL leaves the others serving, the victim refunds its own at restart", async () => {
  const instances = ["a", "b", "c"].map((n) => instanceConfig(n, false));
  const keys = new Map<string, string[]>();
  for (const inst of instances) keys.set(inst.name, await makeUsers(inst));
  const { outcomes } = await runLoad(instances, (n) => keys.get(n)!, "c");

  // The victim's interrupted generations are refunded when it starts again (its own store).
  const restarted = await serve(instances[2]!);
  servers.set("c", restarted);
  await restarted.waitForLog("refunded requests interrupted by a previous stop");
  for (const s of servers.values()) expect(await s.stop()).toBe(0);
  let succeeded = 0;
  let interrupted = 0;
  for (const inst of instances) {
    const db = openDatabase(inst.dir);
    try {
      const seen = await checkLedger(new SqliteClient(db));
      succeeded += seen.succeeded;
      interrupted += seen.interrupted;
    } finally {
      db.close();
    }
  }
  expect(interrupted).toBeGreaterThanOrEqual(1);
  expect(succeeded).toBeGreaterThanOrEqual(outcomes.filter((o) => o.status === 200).length);
  expect(succeeded).toBeLessThanOrEqual(fake.served);
}, 240_000);
test("three instances on one PostgreSQL and one Redis: the limits hold across them, a SIGKILL loses nothing, a live instance refunds the dead one's work once", async () => {
  const instances = ["a", "b", "c"].map((n) => instanceConfig(n, true));
  const keys = await makeUsers(instances[0]!);
  const { outcomes } = await runLoad(instances, () => keys, "c");

  // After the victim's lease ran out, a live instance refunded its generations.
  const db = pg.client();
  const deadline = Date.now() + 30_000;
  while ((await countPending(db)) > 0 && Date.now() < deadline) await Bun.sleep(100);
  const seen = await checkLedger(db);
  expect(seen.requests).toBeLessThanOrEqual(USERS * REQUESTS_PER_USER);
  expect(seen.interrupted).toBeGreaterThanOrEqual(1);
  expect((await db.all<{ owner: string | null }>("SELECT DISTINCT owner FROM requests WHERE status = 'interrupted'")).map((o) => o.owner)).toEqual(["c"]);
  expect(seen.succeeded).toBeGreaterThanOrEqual(outcomes.filter((o) => o.status === 200).length);
  expect(seen.succeeded).toBeLessThanOrEqual(fake.served);
  for (const [name, s] of servers) if (name !== "c") expect(await s.stop()).toBe(0);
}, 240_000);
