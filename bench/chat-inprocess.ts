/**
 * What a chat request costs Atelier's own code, this tree beside a baseline tree (and the floor
 * gateway) in one run: the server's request handler driven with no socket in front of it
 * (bench/support/inprocessChat.ts), against the zero-delay mock upstream of proxy-compare.
 *
 *   bun bench/chat-inprocess.ts [--baseline=<git revision>] [--floor] [--runs=3] [--requests=8000] [--rounds=12]
 *
 * Without the client's socket, wrk and Bun's HTTP parsing in the figure, what is left is the
 * gateway's own work (body guard, auth, Elysia, validation, the flow, the pool, the keep-alive
 * call to the mock, the history row, the access log line, metrics), with 64 requests in flight.
 * The trees run in one process pinned to core 0 (the mock on core 1), each with its own server,
 * modules and data dir, their rounds alternating: the development machine's host load can double
 * a round's time for seconds at a time, and run in separate processes minutes apart two trees
 * differed by more than the changes measured. Alternating round by round, the load falls on
 * both alike; the figure of a tree against the first is the median of its rounds' ratios to the
 * first tree's round just before. `--floor` adds bench/floor.ts's floor gateway (step 8) as one
 * more tree. The baseline is checked out with `git worktree` beside this tree's node_modules
 * (removed afterwards). Loopback only; bounded by the request counts.
 */
import { join } from "node:path";
import { benchArg, median } from "./support/chatBench";
import { HARNESS, freshDataDir, removeAll, withBenchTrees } from "./support/inprocessTrees";

const runs = Number(benchArg("runs", "3"));
const requests = Number(benchArg("requests", "8000"));
const rounds = Number(benchArg("rounds", "12"));

await withBenchTrees("atelier-inprocess-", async ({ dir, template, trees }) => {
  // Per tree, every round of every run; per run, each tree's rounds against the first tree's, round by round.
  const all = new Map<string, number[]>(trees.map((t) => [t.name, []]));
  const ratios = new Map<string, number[]>(trees.slice(1).map((t) => [t.name, []]));
  for (let run = 1; run <= runs; run++) {
    const dataDirs = trees.map((_, i) => freshDataDir(template, join(dir, `run-${run}-${i}`)));
    const child = Bun.spawnSync(
      ["taskset", "-c", "0", process.execPath, HARNESS, String(requests), String(rounds), ...trees.map((t, i) => `${t.root}=${dataDirs[i]}`)],
      { stderr: "inherit" },
    );
    removeAll(dataDirs);
    const out = JSON.parse(child.stdout.toString().trim().split("\n").at(-1)!) as { usPerRequest: number[]; failed: number }[];
    out.forEach((result, i) => {
      const tree = trees[i]!;
      if (result.failed > 0) throw new Error(`${tree.name}: ${result.failed} requests did not answer 200`);
      all.get(tree.name)!.push(...result.usPerRequest);
      if (i > 0) ratios.get(tree.name)!.push(...result.usPerRequest.map((us, r) => us / out[0]!.usPerRequest[r]!));
      console.log(`run ${run} ${tree.name.padEnd(22)} ${result.usPerRequest.map((u) => u.toFixed(1)).join(", ")} µs per request`);
    });
  }
  console.log(`\n${runs} run(s) of ${rounds} rounds × ${requests} requests per tree, 64 in flight, the trees' rounds alternating in one process:`);
  for (const [name, rounds] of all) {
    const ratio = ratios.get(name);
    const paired = ratio ? `   ${median(ratio).toFixed(3)}× ${trees[0]!.name}, round by round (median of ${ratio.length})` : "";
    console.log(`  ${name.padEnd(22)} ${median(rounds).toFixed(1)} µs per request (median round)${paired}`);
  }
});
