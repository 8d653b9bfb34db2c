/**
 * Chat through Atelier beside a bare Bun fetch-proxy, in one run, on the same mock upstream:
 * what the gateway adds to one OpenAI-compatible chat call.
 *
 *   bun bench/proxy-compare.ts [seconds=8] [rounds=1] [--chars=N]
 *
 * With --chars, the prompt and the mock's reply are each N characters of English text instead
 * of one short line (what a gateway does per character shows: redaction, counting, JSON).
 * - the mock: a zero-delay OpenAI-compatible `/v1/chat/completions` (a fixed small answer);
 * - the bare proxy: `Bun.serve` whose handler `fetch`es the mock and returns its answer;
 * - Atelier: `atelier serve` from the source with an `openai` upstream on the mock, a real user
 *   and key (made with the CLI), request logging on (stdout to a file) and the history written;
 * - the load: `wrk` (Debian's package) with a POST script.
 * The gateway and the bare proxy run pinned to core 0 (`taskset -c 0`), the mock and `wrk` to core 1,
 * so the side under test has one core to itself. Each round measures both sides at c=1 and c=64
 * (interleaved), then the script prints req/s, p50 and p99 and the ratios the goals name:
 * c=64 throughput ≥ 0.6× the bare proxy, c=64 p99 ≤ 3× the bare proxy's, added p50 at c=1 ≤ 1.5×
 * the bare proxy's (p50 minus the mock's own direct p50), and with several rounds each round's own
 * c=64 ratios, whose spread is this machine's noise. Finally it checks that every answered
 * request left a history row and an access log line, and prints what Atelier's garbage collector
 * did over the run (its log, BUN_JSC_logGC=1). Loopback only; every run is bounded by time.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ATELIER_CHAT_MODEL, CHAT_SERVERS, atelierHistory, medianResult, requireWrk, startAtelier, startPinned, stopProcess, wrk, writePostScript, type WrkResult,
} from "./support/chatBench";
import { benchText } from "./support/chatServers";
import { formatGc, summarizeGcLog } from "./support/gcLog";

const positional = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const charsArg = process.argv.find((a) => a.startsWith("--chars="));
await compare(Number(positional[0] ?? 8), Number(positional[1] ?? 1), charsArg ? Number(charsArg.slice("--chars=".length)) : undefined);

async function compare(seconds: number, rounds: number, chars?: number): Promise<void> {
  if (chars !== undefined && !(Number.isSafeInteger(chars) && chars > 0)) throw new Error("--chars must be a positive integer");
  requireWrk();
  const dir = mkdtempSync(join(tmpdir(), "atelier-proxy-compare-"));
  const spawned: { kill(): void }[] = [];
  try {
    const mock = await startPinned(1, [process.execPath, CHAT_SERVERS, "mock", ...(chars ? [String(chars)] : [])]);
    spawned.push(mock.proc);
    const mockUrl = `http://127.0.0.1:${mock.port}/v1/chat/completions`;
    const proxy = await startPinned(0, [process.execPath, CHAT_SERVERS, "proxy", mockUrl]);
    spawned.push(proxy.proc);

    const atelier = await startAtelier(dir, mock.port);
    spawned.push(atelier.proc);

    const prompt = chars ? benchText(chars) : "Rewrite: Red kettle 1.7L stainless";
    const body = JSON.stringify({ model: ATELIER_CHAT_MODEL, messages: [{ role: "user", content: prompt }] });
    const script = join(dir, "post.lua");
    writePostScript(script, body, atelier.key);
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

    console.log(`\n${rounds} round(s) of ${seconds} s each; gateway/proxy on core 0, mock and wrk on core 1 (medians over rounds)${chars ? `; prompt and reply of ${chars} characters each` : ""}`);
    console.log(`${"target".padEnd(14)} ${"req/s".padStart(8)} ${"p50 ms".padStart(8)} ${"p99 ms".padStart(8)} ${"CPU µs/req".padStart(11)} ${"requests".padStart(9)}  non-2xx/errors`);
    const med: Record<string, WrkResult> = {};
    for (const [name, rs] of Object.entries(results)) {
      const r = (med[name] = medianResult(rs));
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
    if (rounds > 1) {
      // Each round's own ratios (its two sides measured back to back): how far this machine's
      // load moves a figure between rounds, beside the medians above.
      const perRound = (f: (i: number) => number) => Array.from({ length: rounds }, (_, i) => f(i).toFixed(2)).join(", ");
      const at = (name: string, i: number) => results[name]![i]!;
      console.log(`per round: c=64 throughput ${perRound((i) => at("atelier c=64", i).rps / at("bare c=64", i).rps)}; c=64 p99 ${perRound((i) => at("atelier c=64", i).p99 / at("bare c=64", i).p99)}`);
    }

    // What the gateway promises while it is fast: a history row and an access log line per answer.
    const answered = Object.entries(results).filter(([n]) => n.startsWith("atelier")).flatMap(([, rs]) => rs).reduce((s, r) => s + r.requests, 0);
    await stopProcess(atelier.proc);
    spawned.pop();
    // Its collector over the whole run (warm-up and c=1 included): what a request leaves behind.
    console.log(`\nAtelier's garbage collector over the run: ${formatGc(summarizeGcLog(readFileSync(atelier.gcLogFile, "utf8")))}`);
    const { rows, answeredLines, otherLines } = atelierHistory(dir, atelier.logFile);
    console.log(
      `\nhistory rows (succeeded chat): ${rows}; access log lines for chat answered 200: ${answeredLines} (${otherLines} other, clients gone at a run's end); ` +
        `answered in the measured runs: ${answered} (+ warm-up)   ${rows === answeredLines ? "match" : "MISMATCH"}`,
    );
  } finally {
    for (const p of spawned) p.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}
