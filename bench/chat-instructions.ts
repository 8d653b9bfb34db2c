/**
 * What a chat request costs Atelier's own code in machine instructions, this tree beside a
 * baseline tree (and the floor gateway): the in-process harness of bench/chat-inprocess.ts
 * (bench/support/inprocessChat.ts: the server's request handler, no socket, 64 in flight,
 * against the zero-delay mock) run under valgrind's callgrind, which counts the instructions
 * the process executes whatever else the machine is doing.
 *
 *   bun bench/chat-instructions.ts [--baseline=<git revision>] [--floor] [--requests=1000] [--rounds=4]
 *
 * Why: on the development machine the host's load moves a round's time by 3 % (in one process,
 * alternating) to 50 % (in turn), more than the changes a pass makes; an instruction count moved
 * by 0.5 % between identical runs. Each tree runs in a process of its own (two at a time, one per
 * core), JavaScriptCore's JIT and collector made synchronous (BUN_JSC_useConcurrentJIT=0,
 * useConcurrentGC=0) so that their work lands at the same points of every run; callgrind's
 * counters are zeroed after the harness's warm-up and dumped after its rounds, so the figure is
 * instructions per request in the steady state. Instructions are not time: a frame whose state
 * has left the cache costs more than its count (the README's ninth pass), and native work in
 * the kernel (socket writes) is not counted. Needs valgrind (Debian: apt-get install -y valgrind);
 * about ten minutes for two trees (valgrind runs them some hundred times slower).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { benchArg } from "./support/chatBench";
import { HARNESS, freshDataDir, removeAll, withBenchTrees, type BenchTree } from "./support/inprocessTrees";

const requests = Number(benchArg("requests", "1000"));
const rounds = Number(benchArg("rounds", "4"));
/** The harness rounds each client's share up: this many requests run per round. */
const CONCURRENCY = 64;
const perRound = Math.ceil(requests / CONCURRENCY) * CONCURRENCY;

if (!Bun.which("valgrind") || !Bun.which("callgrind_control")) throw new Error("valgrind is missing: apt-get install -y valgrind");

await withBenchTrees("atelier-instructions-", async ({ dir, template, trees }) => {
  /** One tree's harness under callgrind: the instructions of its measured rounds over their requests. */
  async function instructionsPerRequest(tree: BenchTree, path: string): Promise<number> {
    const data = freshDataDir(template, path);
    const out = join(path, "callgrind.out");
    const child = Bun.spawn(
      ["valgrind", "--tool=callgrind", `--callgrind-out-file=${out}`, process.execPath, HARNESS, String(requests), String(rounds), `${tree.root}=${data}`],
      { env: { ...process.env, ATELIER_CALLGRIND: "1", BUN_JSC_useConcurrentJIT: "0", BUN_JSC_useConcurrentGC: "0" }, stdout: "pipe", stderr: "pipe" },
    );
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    if (code !== 0) throw new Error(`${tree.name}: the harness exited with ${code}: ${stderr.slice(-2000)}`);
    const result = JSON.parse(stdout.trim().split("\n").at(-1)!) as { failed: number }[];
    if (result[0]!.failed > 0) throw new Error(`${tree.name}: ${result[0]!.failed} requests did not answer 200`);
    // The dump after the rounds (the harness asked for it: callgrind_control --dump) is the file's first part.
    const summary = /^summary: (\d+)$/m.exec(readFileSync(`${out}.1`, "utf8"))?.[1];
    if (!summary) throw new Error(`${tree.name}: no callgrind dump after the rounds`);
    removeAll([data]);
    return Number(summary) / (rounds * perRound);
  }

  const counts = new Map<BenchTree, number>();
  // Two at a time: valgrind runs a process on one core.
  for (let i = 0; i < trees.length; i += 2) {
    await Promise.all(trees.slice(i, i + 2).map(async (tree, j) => counts.set(tree, await instructionsPerRequest(tree, join(dir, `tree-${i + j}`)))));
  }
  const first = counts.get(trees[0]!)!;
  console.log(`\n${rounds} rounds × ${perRound} requests per tree after a warm-up, 64 in flight, under callgrind:`);
  for (const tree of trees) {
    const n = counts.get(tree)!;
    console.log(`  ${tree.name.padEnd(22)} ${(n / 1000).toFixed(1).padStart(7)} k instructions per request${tree === trees[0] ? "" : `   ${(n / first).toFixed(3)}× ${trees[0]!.name}`}`);
  }
});
