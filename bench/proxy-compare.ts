/**
 * Chat through Atelier beside a bare Bun fetch-proxy, in one run, on the same mock upstream:
 * what the gateway adds to one OpenAI-compatible chat call.
 *
 *   bun bench/proxy-compare.ts [seconds=8] [rounds=1]
 *
 * - the mock: a zero-delay OpenAI-compatible `/v1/chat/completions` (a fixed small answer);
 * - the bare proxy: `Bun.serve` whose handler `fetch`es the mock and returns its answer;
 * - Atelier: `atelier serve` from the source with an `openai` upstream on the mock, a real user
 *   and key (made with the CLI), request logging on (stdout to a file) and the history written;
 * - the load: `wrk` (Debian's package) with a POST script.
 * The gateway and the bare proxy run pinned to core 0 (`taskset -c 0`), the mock and `wrk` to core 1,
 * so the side under test has one core to itself. Each round measures both sides at c=1 and c=64
 * (interleaved), then the script prints req/s, p50 and p99 and the ratios the goals name:
 * c=64 throughput ≥ 0.6× the bare proxy, c=64 p99 ≤ 3× the bare proxy's, added p50 at c=1 ≤ 1.5×
 * the bare proxy's (p50 minus the mock's own direct p50). Finally it checks that every answered
 * request left a history row and an access log line. Loopback only; every run is bounded by time.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";

const ANSWER = JSON.stringify({
  id: "chatcmpl-mock",
  object: "chat.completion",
  created: 1700000000,
  model: "mock-model",
  choices: [{ index: 0, message: { role: "assistant", content: "A red stainless kettle, 1.7 litres." }, finish_reason: "stop" }],
  usage: { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 },
});

const mode = process.argv[2];
if (mode === "mock") {
  // Zero delay: the same bytes for every POST.
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response(ANSWER, { headers: { "content-type": "application/json" } }) });
  console.log(`port ${server.port}`);
} else if (mode === "proxy") {
  const upstream = process.argv[3]!;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const res = await fetch(upstream, { method: "POST", headers: { "content-type": "application/json" }, body: await req.text() });
      return new Response(await res.arrayBuffer(), { status: res.status, headers: { "content-type": "application/json" } });
    },
  });
  console.log(`port ${server.port}`);
} else {
  await compare(Number(process.argv[2] ?? 8), Number(process.argv[3] ?? 1));
}

interface WrkResult {
  /** CPU time (user + system) the process under test spent per answered request, in µs. */
  cpuUs: number;
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  errors: number;
}

async function compare(seconds: number, rounds: number): Promise<void> {
  if (!Bun.which("wrk")) throw new Error("wrk is missing: apt-get install -y wrk");
  const dir = mkdtempSync(join(tmpdir(), "atelier-proxy-compare-"));
  const spawned: { kill(): void }[] = [];
  try {
    const mock = await startPinned(1, [process.execPath, import.meta.path, "mock"]);
    spawned.push(mock.proc);
    const mockUrl = `http://127.0.0.1:${mock.port}/v1/chat/completions`;
    const proxy = await startPinned(0, [process.execPath, import.meta.path, "proxy", mockUrl]);
    spawned.push(proxy.proc);

    const repo = join(import.meta.dir, "..");
    const config = join(dir, "atelier.toml");
    // The gateway's own limits must not be what is measured: enough chat slots and account capacity for c=64.
    writeFileSync(
      config,
      `[server]\nhost = "127.0.0.1"\nlog_requests = true\n\n[limits]\nchat_concurrency = 256\n\n` +
        `[[upstreams]]\nid = "mock"\nkind = "openai"\nbase_url = "http://127.0.0.1:${mock.port}/v1"\n` +
        `accounts = [ { id = "a", api_key = "sk-mock-secret", max_concurrency = 256 } ]\n\n` +
        `[[models]]\nid = "mock-chat"\nkind = "chat"\nupstream = "mock"\nupstream_model = "mock-model"\n`,
    );
    const cli = (...args: string[]) => {
      const r = Bun.spawnSync([process.execPath, join(repo, "src/main.ts"), ...args, "--config", config, "--data", dir], { cwd: dir });
      if (r.exitCode !== 0) throw new Error(`atelier ${args.join(" ")}: ${r.stderr.toString()}`);
      return r.stdout.toString().trimEnd().split("\n").at(-1)!;
    };
    cli("user", "add", "bench@example.com");
    const key = cli("key", "create", "bench@example.com", "--name", "bench");
    const logFile = join(dir, "atelier.log");
    const atelier = await startPinned(0, [process.execPath, join(repo, "src/main.ts"), "serve", "--config", config, "--data", dir, "--port", "0"], logFile);
    spawned.push(atelier.proc);

    const body = JSON.stringify({ model: "mock-chat", messages: [{ role: "user", content: "Rewrite: Red kettle 1.7L stainless" }] });
    const script = join(dir, "post.lua");
    writeFileSync(
      script,
      `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body)}\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer ${key}"\n`,
    );
    const targets = {
      mock: mockUrl,
      bare: `http://127.0.0.1:${proxy.port}/v1/chat/completions`,
      atelier: `http://127.0.0.1:${atelier.port}/v1/chat/completions`,
    };
    // Warm both sides (JIT, keep-alive pools) before anything is recorded.
    for (const url of [targets.bare, targets.atelier]) await wrk(url, script, 8, 2);

    const results: Record<string, WrkResult[]> = {};
    const add = (name: string, r: WrkResult) => (results[name] ??= []).push(r);
    for (let round = 0; round < rounds; round++) {
      add("mock c=1", await wrk(targets.mock, script, 1, seconds, mock.proc.pid));
      for (const c of [1, 64]) {
        add(`bare c=${c}`, await wrk(targets.bare, script, c, seconds, proxy.proc.pid));
        add(`atelier c=${c}`, await wrk(targets.atelier, script, c, seconds, atelier.proc.pid));
      }
    }

    console.log(`\n${rounds} round(s) of ${seconds} s each; gateway/proxy on core 0, mock and wrk on core 1 (medians over rounds)`);
    console.log(`${"target".padEnd(14)} ${"req/s".padStart(8)} ${"p50 ms".padStart(8)} ${"p99 ms".padStart(8)} ${"CPU µs/req".padStart(11)} ${"requests".padStart(9)}  non-2xx/errors`);
    const med: Record<string, WrkResult> = {};
    for (const [name, rs] of Object.entries(results)) {
      const m = (f: (r: WrkResult) => number) => median(rs.map(f));
      med[name] = { cpuUs: m((r) => r.cpuUs), rps: m((r) => r.rps), p50: m((r) => r.p50), p99: m((r) => r.p99), requests: m((r) => r.requests), non2xx: m((r) => r.non2xx), errors: m((r) => r.errors) };
      const r = med[name]!;
      console.log(
        `${name.padEnd(14)} ${r.rps.toFixed(0).padStart(8)} ${r.p50.toFixed(3).padStart(8)} ${r.p99.toFixed(3).padStart(8)} ${r.cpuUs.toFixed(0).padStart(11)} ${String(r.requests).padStart(9)}  ${r.non2xx}/${r.errors}`,
      );
    }
    const mockP50 = med["mock c=1"]!.p50;
    const throughput = med["atelier c=64"]!.rps / med["bare c=64"]!.rps;
    const p99 = med["atelier c=64"]!.p99 / med["bare c=64"]!.p99;
    const added = (med["atelier c=1"]!.p50 - mockP50) / Math.max(0.001, med["bare c=1"]!.p50 - mockP50);
    console.log(`\nc=64 throughput: ${throughput.toFixed(2)}× the bare proxy (goal ≥ 0.6)   ${throughput >= 0.6 ? "met" : "NOT met"}`);
    console.log(`c=64 p99:        ${p99.toFixed(2)}× the bare proxy's (goal ≤ 3)   ${p99 <= 3 ? "met" : "NOT met"}`);
    console.log(`CPU per request at c=64: ${med["atelier c=64"]!.cpuUs.toFixed(0)} µs vs ${med["bare c=64"]!.cpuUs.toFixed(0)} µs (${(med["atelier c=64"]!.cpuUs / med["bare c=64"]!.cpuUs).toFixed(1)}×; load from other processes does not inflate this figure)`);
    console.log(`c=1 added p50:   ${added.toFixed(2)}× the bare proxy's (goal ≤ 1.5; p50 minus the mock's direct ${mockP50.toFixed(3)} ms)   ${added <= 1.5 ? "met" : "NOT met"}`);

    // What the gateway promises while it is fast: a history row and an access log line per answer.
    const answered = Object.entries(results).filter(([n]) => n.startsWith("atelier")).flatMap(([, rs]) => rs).reduce((s, r) => s + r.requests, 0);
    await stopProcess(atelier.proc);
    spawned.pop();
    const db = new Database(join(dir, "atelier.db"), { readonly: true });
    const rows = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM requests WHERE kind = 'chat' AND status = 'succeeded'").get()!.n;
    db.close();
    const chatLines = readFileSync(logFile, "utf8").split("\n").filter((l) => l.includes('"msg":"request"') && l.includes("/v1/chat/completions"));
    // wrk hangs up on the requests still in flight when a run ends: one that had run past the
    // client-signal watch (core/clientSignal) is then cancelled, logged but not a succeeded row.
    const answeredLines = chatLines.filter((l) => l.includes('"status":200,')).length;
    console.log(
      `\nhistory rows (succeeded chat): ${rows}; access log lines for chat answered 200: ${answeredLines} (${chatLines.length - answeredLines} other, clients gone at a run's end); ` +
        `answered in the measured runs: ${answered} (+ warm-up)   ${rows === answeredLines ? "match" : "MISMATCH"}`,
    );
  } finally {
    for (const p of spawned) p.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Starts a process on one core and waits for the port it prints ("port N") or logs ("listening"). */
async function startPinned(core: number, argv: string[], logFile?: string): Promise<{ proc: ReturnType<typeof Bun.spawn>; port: number }> {
  const proc = Bun.spawn(["taskset", "-c", String(core), ...argv], { stdout: logFile ? Bun.file(logFile) : "pipe", stderr: "inherit" });
  const deadline = Date.now() + 30_000;
  for (;;) {
    const text = logFile ? readFileSync(logFile, "utf8") : await firstLine(proc.stdout as ReadableStream<Uint8Array>);
    const port = /port (\d+)/.exec(text)?.[1] ?? /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(text)?.[1];
    if (port) return { proc, port: Number(port) };
    if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`${argv.join(" ")} did not start: ${text}`);
    await Bun.sleep(100);
  }
}

async function firstLine(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.getReader();
  const { value } = await reader.read();
  reader.releaseLock();
  return new TextDecoder().decode(value);
}

async function stopProcess(proc: ReturnType<typeof Bun.spawn>): Promise<void> {
  proc.kill("SIGTERM");
  await Promise.race([proc.exited, Bun.sleep(15_000)]);
}

/** User + system CPU time of a process so far, in µs (from /proc; clock ticks of 10 ms). */
function cpuTimeUs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / 100;
}

async function wrk(url: string, script: string, connections: number, seconds: number, pid?: number): Promise<WrkResult> {
  const cpuBefore = pid ? cpuTimeUs(pid) : 0;
  const r = Bun.spawnSync(["taskset", "-c", "1", "wrk", "-t", "1", "-c", String(connections), "-d", `${seconds}s`, "--latency", "-s", script, url]);
  const out = r.stdout.toString();
  const ms = (label: string) => {
    const m = new RegExp(`^\\s*${label}\\s+([\\d.]+)(us|ms|s)\\s*$`, "m").exec(out);
    if (!m) throw new Error(`wrk output without ${label}:\n${out}\n${r.stderr.toString()}`);
    return Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "s" ? 1000 : 1);
  };
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  return {
    cpuUs: pid && requests > 0 ? (cpuTimeUs(pid) - cpuBefore) / requests : 0,
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0),
    p50: ms("50%"),
    p99: ms("99%"),
    requests,
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0),
    errors: errors ? errors.slice(1).reduce((s, n) => s + Number(n), 0) : 0,
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}
