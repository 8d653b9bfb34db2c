/**
 * The floor of the chat path: what the best gateway with Atelier's duties reaches on this stack
 * (Bun + Elysia + TypeBox + bun:sqlite + prom-client), beside a bare Bun fetch-proxy, in one run.
 *
 *   bun bench/floor.ts [seconds=5] [rounds=1] [--atelier]
 *
 * - the mock and the bare proxy of bench/proxy-compare.ts (bench/support/chatServers.ts);
 * - the floor gateway (bench/support/floorGateway.ts) in eight cumulative steps, one process
 *   each, every one a correct minimal gateway: Elysia with Atelier's request schema, fetch and
 *   the chat.completion answer; + an AbortController and a timer per request; + the key (SHA-256
 *   and a Map; 401 for a wrong key); + the history row in Atelier's own `requests` table (a
 *   SQLite file migrated by src/store/migrations.ts, WAL, synchronous=NORMAL), queued and written
 *   every 20 ms in one transaction; + a buffered access-log line to a file; + the request metrics
 *   (Atelier's RequestMetrics, prom-client registry); + Elysia validating the answer against
 *   Atelier's response schema;
 * - with --atelier, `atelier serve` from the source as bench/proxy-compare.ts runs it.
 * Every server is pinned to core 0, the mock and `wrk` to core 1; each round measures every
 * target in turn at c=64, and the script prints medians over rounds: req/s, p99, the CPU time
 * of the server per request (from /proc), the throughput as a multiple of the bare proxy's, and
 * the bare proxy's CPU per request over the target's (what that multiple would be if the server's
 * core were the only limit).
 * Then it checks that the floor does its work: a valid answer, 401 for a wrong key, 400 for a
 * bad body, and history rows, access-log lines and metrics matching the answered requests.
 * Loopback only; every run is bounded by time.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { Value } from "@sinclair/typebox/value";
import { generateApiKey, type NewApiKey } from "../src/core/apiKeys";
import { ChatCompletion } from "../src/http/v1/chat/model";
import { databasePath, openDatabase } from "../src/store/database";
import {
  ATELIER_CHAT_MODEL, CHAT_SERVERS, atelierHistory, medianResult, requireWrk, startAtelier, startPinned, stopProcess, wrk, writePostScript, type Spawned, type WrkResult,
} from "./support/chatBench";
import { MOCK_ANSWER } from "./support/chatServers";
import { FLOOR_MODEL } from "./support/floorGateway";

const FLOOR_GATEWAY = join(import.meta.dir, "support/floorGateway.ts");
/** What each step of the floor gateway adds (its step number is its position + 1). */
const STEPS = [
  "Elysia + request schema, fetch, answer",
  "+ AbortController + timer",
  "+ key: SHA-256 + Map",
  "+ history row (SQLite file, batched)",
  "+ access-log line (buffered)",
  "+ request metrics",
  "+ response schema",
  "= 7, keep-alive client instead of fetch",
] as const;
const FIRST_HISTORY_STEP = 4;
const FIRST_LOG_STEP = 5;
const FIRST_METRICS_STEP = 6;
const FIRST_KEY_STEP = 3;
const CONNECTIONS = 64;
const PROMPT = "Rewrite: Red kettle 1.7L stainless";
const BENCH_EMAIL = "bench@example.com";

const args = process.argv.slice(2);
const [seconds = 5, rounds = 1] = args.filter((a) => !a.startsWith("--")).map(Number);
await measureFloor(seconds, rounds, args.includes("--atelier"));

interface Target {
  name: string;
  url: string;
  proc: Spawned;
  script: string;
  /** The floor gateway's step (1..8); absent for the bare proxy and Atelier. */
  step?: number;
  dataDir?: string;
  /** Every run against it, warm-up included (their answers count for the history check). */
  runs: WrkResult[];
}

async function measureFloor(seconds: number, rounds: number, withAtelier: boolean): Promise<void> {
  requireWrk();
  const dir = mkdtempSync(join(tmpdir(), "atelier-floor-"));
  const spawned: Spawned[] = [];
  try {
    const mock = await startPinned(1, [process.execPath, CHAT_SERVERS, "mock"]);
    spawned.push(mock.proc);
    const mockUrl = `http://127.0.0.1:${mock.port}/v1/chat/completions`;
    const body = JSON.stringify({ model: FLOOR_MODEL, messages: [{ role: "user", content: PROMPT }] });
    const key = generateApiKey();
    const floorScript = join(dir, "floor.lua");
    writePostScript(floorScript, body, key.secret);

    const targets: Target[] = [];
    const proxy = await startPinned(0, [process.execPath, CHAT_SERVERS, "proxy", mockUrl]);
    spawned.push(proxy.proc);
    targets.push({ name: "bare fetch-proxy", url: `http://127.0.0.1:${proxy.port}/v1/chat/completions`, proc: proxy.proc, script: floorScript, runs: [] });
    for (const [i, label] of STEPS.entries()) {
      const step = i + 1;
      const dataDir = join(dir, `floor-${step}`);
      prepareFloorData(dataDir, key);
      const floor = await startPinned(0, [process.execPath, FLOOR_GATEWAY, String(step), mockUrl, dataDir]);
      spawned.push(floor.proc);
      targets.push({ name: `${step} ${label}`, url: `http://127.0.0.1:${floor.port}/v1/chat/completions`, proc: floor.proc, script: floorScript, step, dataDir, runs: [] });
    }
    let atelier: Awaited<ReturnType<typeof startAtelier>> | undefined;
    const atelierDir = join(dir, "atelier");
    if (withAtelier) {
      mkdirSync(atelierDir);
      atelier = await startAtelier(atelierDir, mock.port);
      spawned.push(atelier.proc);
      const script = join(dir, "atelier.lua");
      writePostScript(script, JSON.stringify({ model: ATELIER_CHAT_MODEL, messages: [{ role: "user", content: PROMPT }] }), atelier.key);
      targets.push({ name: "Atelier", url: `http://127.0.0.1:${atelier.port}/v1/chat/completions`, proc: atelier.proc, script, runs: [] });
    }

    // Warm every target (JIT, keep-alive pools) before anything is recorded.
    for (const t of targets) t.runs.push(await wrk(t.url, t.script, 8, 2));
    const measured = new Map<Target, WrkResult[]>(targets.map((t) => [t, []]));
    for (let round = 0; round < rounds; round++) {
      for (const t of targets) {
        const r = await wrk(t.url, t.script, CONNECTIONS, seconds, t.proc.pid);
        t.runs.push(r);
        measured.get(t)!.push(r);
      }
    }

    console.log(`\n${rounds} round(s) of ${seconds} s each at c=${CONNECTIONS}; servers on core 0, mock and wrk on core 1 (medians over rounds)`);
    // "× bare": the throughput as a multiple of the bare proxy's (the issue's ratio); "CPU × bare":
    // the bare proxy's CPU per request over this one's, the ratio the throughputs would have if the
    // server's core were the only limit (wrk shares core 1 with whatever else runs there).
    console.log(
      `${"target".padEnd(42)} ${"req/s".padStart(7)} ${"p99 ms".padStart(7)} ${"CPU µs/req".padStart(11)} ${"× bare".padStart(7)} ${"CPU × bare".padStart(11)} ${"requests".padStart(9)}  non-2xx/errors`,
    );
    const bare = medianResult(measured.get(targets[0]!)!);
    for (const [t, rs] of measured) {
      const r = medianResult(rs);
      console.log(
        `${t.name.padEnd(42)} ${r.rps.toFixed(0).padStart(7)} ${r.p99.toFixed(2).padStart(7)} ${r.cpuUs.toFixed(0).padStart(11)} ${(r.rps / bare.rps).toFixed(2).padStart(7)} ` +
          `${(bare.cpuUs / r.cpuUs).toFixed(2).padStart(11)} ${String(r.requests).padStart(9)}  ${r.non2xx}/${r.errors}`,
      );
    }

    // The figures are of gateways that do their work: answers, refusals, rows, lines, metrics.
    console.log("");
    let allGood = true;
    for (const t of targets) {
      if (t.step === undefined || t.dataDir === undefined) continue;
      const { problems, facts } = await checkFloor(t, key);
      allGood &&= problems.length === 0;
      console.log(`floor step ${t.step}: ${problems.length === 0 ? `ok (${facts})` : `FAILED: ${problems.join("; ")}`}`);
    }
    if (atelier) {
      await stopProcess(atelier.proc);
      const { rows, answeredLines, otherLines } = atelierHistory(atelierDir, atelier.logFile);
      allGood &&= rows === answeredLines;
      console.log(`Atelier: history rows (succeeded chat) ${rows}; access-log lines answered 200: ${answeredLines} (${otherLines} other)   ${rows === answeredLines ? "match" : "MISMATCH"}`);
    }
    console.log(allGood ? "every check passed" : "SOME CHECKS FAILED");
    if (!allGood) process.exitCode = 1;
  } finally {
    for (const p of spawned) p.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A data dir for one floor gateway: Atelier's migrated database with the bench user and its key. */
function prepareFloorData(dataDir: string, key: NewApiKey): void {
  const db = openDatabase(dataDir);
  const now = Date.now();
  const user = db.query<{ id: number }, [string, number]>("INSERT INTO users (email, role, credits, created_at) VALUES (?, 'user', 0, ?) RETURNING id").get(BENCH_EMAIL, now)!;
  db.query("INSERT INTO api_keys (user_id, name, prefix, secret_hash, created_at) VALUES (?, 'bench', ?, ?, ?)").run(user.id, key.prefix, key.hash, now);
  db.close();
}

/**
 * Probes one floor gateway, stops it (its queued rows and lines are written), then compares its
 * history rows with the answers wrk and the probes got, its access log and its metrics.
 * Returns what is wrong (nothing when it did its work) and what was compared.
 */
async function checkFloor(t: Target, key: NewApiKey): Promise<{ problems: string[]; facts: string }> {
  const problems: string[] = [];
  const step = t.step!;
  const post = (authorization: string, body: unknown) =>
    fetch(t.url, { method: "POST", headers: { "content-type": "application/json", authorization }, body: JSON.stringify(body) });
  const good = await post(`Bearer ${key.secret}`, { model: FLOOR_MODEL, messages: [{ role: "user", content: PROMPT }] });
  const answer: unknown = await good.json();
  if (good.status !== 200 || !Value.Check(ChatCompletion, answer) || answer.choices[0]!.message.content !== MOCK_ANSWER.choices[0].message.content) {
    problems.push(`a valid request got ${good.status} ${JSON.stringify(answer).slice(0, 200)}`);
  }
  const badBody = await post(`Bearer ${key.secret}`, { model: FLOOR_MODEL, messages: "hi" });
  const badBodyAnswer = (await badBody.json()) as { error?: { type?: string } };
  if (badBody.status !== 400 || badBodyAnswer.error?.type !== "invalid_request_error") problems.push(`a bad body got ${badBody.status}`);
  if (step >= FIRST_KEY_STEP) {
    const wrongKey = await post(`Bearer ${generateApiKey().secret}`, { model: FLOOR_MODEL, messages: [{ role: "user", content: PROMPT }] });
    const wrongKeyAnswer = (await wrongKey.json()) as { error?: { code?: string } };
    if (wrongKey.status !== 401 || wrongKeyAnswer.error?.code !== "invalid_api_key") problems.push(`a wrong key got ${wrongKey.status}`);
  }
  const metricsText = step >= FIRST_METRICS_STEP ? await (await fetch(t.url.replace("/v1/chat/completions", "/metrics"), { headers: { authorization: `Bearer ${key.secret}` } })).text() : "";
  await stopProcess(t.proc);
  if (t.proc.exitCode !== 0) problems.push(`the gateway exited with ${t.proc.exitCode}`);
  if (step < FIRST_HISTORY_STEP) return { problems, facts: "answers, refusals" };

  // wrk's count misses the requests in flight when a run ends (it hangs up; the gateway still
  // answers and records them): at most CONNECTIONS per run more rows than wrk counted.
  const answered = t.runs.reduce((s, r) => s + r.requests - r.non2xx, 0) + 1;
  const db = new Database(databasePath(t.dataDir!), { readonly: true });
  const rows = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM requests WHERE kind = 'chat' AND status = 'succeeded'").get()!.n;
  const unlike = db
    .query<{ n: number }, [string, number, number]>(
      "SELECT COUNT(*) AS n FROM requests WHERE NOT (kind = 'chat' AND status = 'succeeded' AND prompt = ? AND prompt_tokens = ? AND completion_tokens = ? AND key_id IS NOT NULL AND finished_at >= created_at)",
    )
    .get(PROMPT, MOCK_ANSWER.usage.prompt_tokens, MOCK_ANSWER.usage.completion_tokens)!.n;
  db.close();
  const slack = CONNECTIONS * t.runs.length;
  if (rows < answered || rows > answered + slack) problems.push(`${rows} history rows for ${answered} answers counted by the clients (+ at most ${slack} cut off)`);
  if (unlike > 0) problems.push(`${unlike} rows not what was asked and answered`);
  let facts = `${rows} history rows for ${answered} answers counted by the clients`;
  if (step >= FIRST_LOG_STEP) {
    const lines = readFileSync(join(t.dataDir!, "access.log"), "utf8").split("\n").filter(Boolean);
    const ok = lines.filter((l) => l.includes('"status":200,')).length;
    if (ok !== rows) problems.push(`${ok} access-log lines answered 200 for ${rows} rows`);
    facts += `, ${ok} log lines 200 (${lines.length - ok} other)`;
  }
  if (step >= FIRST_METRICS_STEP) {
    const counted = Number(/^atelier_http_requests_total\{[^}]*status="200"[^}]*\} (\d+)/m.exec(metricsText)?.[1] ?? -1);
    if (counted !== rows) problems.push(`metrics count ${counted} answers 200 for ${rows} rows`);
    facts += `, metrics ${counted}`;
  }
  return { problems, facts };
}
