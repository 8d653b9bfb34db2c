/**
 * What a chat request costs Atelier's own code, this tree beside a baseline tree in one run:
 * the server's request handler driven in a process of its own with no socket in front of it
 * (bench/support/inprocessChat.ts), against the zero-delay mock upstream of proxy-compare.
 *
 *   bun bench/chat-inprocess.ts [--baseline=<git revision>] [--pairs=4] [--requests=16000] [--rounds=5]
 *
 * Without the client's socket, wrk and Bun's HTTP parsing in the figure, what is left is the
 * gateway's own work (body guard, auth, Elysia, validation, the flow, the pool, the keep-alive
 * call to the mock, the history row, the access log line, metrics), with 64 requests in flight.
 * On the 2-core development machine its spread between runs is about a third of proxy-compare's,
 * which makes a change of a few µs visible: the two trees run in turn (baseline, this tree,
 * baseline, …, each in a fresh process and data dir), pinned to core 0 with the mock on core 1,
 * so load from elsewhere hits both alike. A run's figure is its least round (load from elsewhere
 * only adds to a round; on this machine one round in five can take twice the others); the
 * summary is the median of those per tree. The baseline is checked out with `git worktree` beside this tree's
 * node_modules (removed afterwards). Loopback only; bounded by the request counts.
 */
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ATELIER_CHAT_MODEL, CHAT_SERVERS, median, startPinned } from "./support/chatBench";

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const baseline = arg("baseline", "");
const pairs = Number(arg("pairs", "4"));
const requests = Number(arg("requests", "16000"));
const rounds = Number(arg("rounds", "5"));
const repo = join(import.meta.dir, "..");
const HARNESS = join(import.meta.dir, "support/inprocessChat.ts");

const dir = mkdtempSync(join(tmpdir(), "atelier-inprocess-"));
// Undone in reverse order: the baseline worktree, the mock, then the temporary directory.
const cleanup: (() => void)[] = [() => rmSync(dir, { recursive: true, force: true })];
try {
  const mock = await startPinned(1, [process.execPath, CHAT_SERVERS, "mock"]);
  cleanup.push(() => mock.proc.kill());

  // One data dir made with this tree's CLI (a user, a key), copied fresh for every run.
  const template = join(dir, "template");
  mkdirSync(template);
  writeFileSync(
    join(template, "atelier.toml"),
    `[server]\nhost = "127.0.0.1"\nlog_requests = true\n\n[limits]\nchat_concurrency = 256\n\n` +
      `[[upstreams]]\nid = "mock"\nkind = "openai"\nbase_url = "http://127.0.0.1:${mock.port}/v1"\n` +
      `accounts = [ { id = "a", api_key = "sk-mock-secret", max_concurrency = 256 } ]\n\n` +
      `[[models]]\nid = "${ATELIER_CHAT_MODEL}"\nkind = "chat"\nupstream = "mock"\nupstream_model = "mock-model"\n`,
  );
  const cli = (...args: string[]) => {
    const r = Bun.spawnSync([process.execPath, join(repo, "src/main.ts"), ...args, "--config", join(template, "atelier.toml"), "--data", template], { cwd: template });
    if (r.exitCode !== 0) throw new Error(`atelier ${args.join(" ")}: ${r.stderr.toString()}`);
    return r.stdout.toString().trimEnd().split("\n").at(-1)!;
  };
  cli("user", "add", "bench@example.com");
  writeFileSync(join(template, "key"), cli("key", "create", "bench@example.com", "--name", "bench"));

  const trees: { name: string; root: string }[] = [{ name: "this tree", root: repo }];
  if (baseline) {
    const root = join(dir, "baseline");
    const add = Bun.spawnSync(["git", "-C", repo, "worktree", "add", "--detach", root, baseline]);
    if (add.exitCode !== 0) throw new Error(`git worktree add ${baseline}: ${add.stderr.toString()}`);
    cleanup.push(() => Bun.spawnSync(["git", "-C", repo, "worktree", "remove", "--force", root]));
    symlinkSync(join(repo, "node_modules"), join(root, "node_modules"));
    trees.unshift({ name: `baseline ${baseline}`, root });
  }

  const results = new Map<string, number[]>(trees.map((t) => [t.name, []]));
  let run = 0;
  for (let pair = 0; pair < pairs; pair++) {
    for (const tree of trees) {
      const data = join(dir, `run-${++run}`);
      cpSync(template, data, { recursive: true });
      const child = Bun.spawnSync(["taskset", "-c", "0", process.execPath, HARNESS, tree.root, data, String(requests), String(rounds)], { stderr: "inherit" });
      rmSync(data, { recursive: true, force: true });
      const out = JSON.parse(child.stdout.toString().trim().split("\n").at(-1)!) as { usPerRequest: number[]; failed: number };
      if (out.failed > 0) throw new Error(`${tree.name}: ${out.failed} requests did not answer 200`);
      // The least a round took: load from elsewhere on the machine only ever adds to a round.
      const us = Math.min(...out.usPerRequest);
      results.get(tree.name)!.push(us);
      console.log(`${tree.name.padEnd(22)} run ${pair + 1}: ${us.toFixed(1)} µs per request, its least round (rounds: ${out.usPerRequest.map((u) => u.toFixed(1)).join(", ")})`);
    }
  }
  console.log(`\n${pairs} run(s) per tree of ${rounds} rounds × ${requests} requests, 64 in flight; CPU µs per chat request (median over runs of each run's least round):`);
  for (const [name, runs] of results) console.log(`  ${name.padEnd(22)} ${median(runs).toFixed(1)} µs   (runs: ${runs.map((u) => u.toFixed(1)).join(", ")})`);
  if (baseline) {
    const [before, after] = [...results.values()].map(median) as [number, number];
    console.log(`  this tree / baseline   ${(after / before).toFixed(2)}×`);
  }
} finally {
  for (const step of cleanup.reverse()) step();
}
