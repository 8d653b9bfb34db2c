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
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ATELIER_CHAT_MODEL, CHAT_SERVERS, median, startPinned } from "./support/chatBench";

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const baseline = arg("baseline", "");
const runs = Number(arg("runs", "3"));
const requests = Number(arg("requests", "8000"));
const rounds = Number(arg("rounds", "12"));
const withFloor = process.argv.includes("--floor");
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
  if (withFloor) trees.push({ name: "floor gateway", root: "floor" });

  // Per tree, every round of every run; per run, each tree's rounds against the first tree's, round by round.
  const all = new Map<string, number[]>(trees.map((t) => [t.name, []]));
  const ratios = new Map<string, number[]>(trees.slice(1).map((t) => [t.name, []]));
  for (let run = 1; run <= runs; run++) {
    const dataDirs = trees.map((_, i) => {
      const data = join(dir, `run-${run}-${i}`);
      cpSync(template, data, { recursive: true });
      return data;
    });
    const child = Bun.spawnSync(
      ["taskset", "-c", "0", process.execPath, HARNESS, String(requests), String(rounds), ...trees.map((t, i) => `${t.root}=${dataDirs[i]}`)],
      { stderr: "inherit" },
    );
    for (const data of dataDirs) rmSync(data, { recursive: true, force: true });
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
} finally {
  for (const step of cleanup.reverse()) step();
}
