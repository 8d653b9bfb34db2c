/**
 * What bench/chat-inprocess.ts and bench/chat-instructions.ts share: a data dir template for
 * the in-process harness (bench/support/inprocessChat.ts) on the zero-delay mock, and the trees
 * to compare (this one, a baseline revision checked out with `git worktree`, the floor gateway).
 */
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ATELIER_CHAT_MODEL, CHAT_SERVERS, benchArg, startPinned } from "./chatBench";

export const REPO = join(import.meta.dir, "../..");
export const HARNESS = join(import.meta.dir, "inprocessChat.ts");

export interface BenchTree {
  name: string;
  /** A repo root, or `floor` for the floor gateway (bench/support/floorGateway.ts, step 8). */
  root: string;
}

/**
 * A data dir made with the CLI of `repo` (atelier.toml with an `openai` upstream on the mock, a
 * user, and that user's key in the file `key`), to be copied fresh for every run (freshDataDir).
 * Made by the oldest tree: a newer one migrates its database at start, an older one refuses a
 * database of a newer schema.
 */
function makeTemplate(dir: string, mockPort: number, repo: string): string {
  const template = join(dir, "template");
  mkdirSync(template);
  writeFileSync(
    join(template, "atelier.toml"),
    `[server]\nhost = "127.0.0.1"\nlog_requests = true\n\n[limits]\nchat_concurrency = 256\n\n` +
      `[[upstreams]]\nid = "mock"\nkind = "openai"\nbase_url = "http://127.0.0.1:${mockPort}/v1"\n` +
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
  return template;
}

/** A copy of the template for one run (its database and log are the run's own). */
export function freshDataDir(template: string, path: string): string {
  cpSync(template, path, { recursive: true });
  return path;
}

/**
 * This tree, the baseline before it (a `git worktree` beside this tree's node_modules; its
 * removal is pushed onto `cleanup`) and the floor gateway after it, as asked.
 */
function benchTrees(dir: string, baseline: string, withFloor: boolean, cleanup: (() => void)[]): BenchTree[] {
  const trees: BenchTree[] = [{ name: "this tree", root: REPO }];
  if (baseline) {
    const root = join(dir, "baseline");
    const add = Bun.spawnSync(["git", "-C", REPO, "worktree", "add", "--detach", root, baseline]);
    if (add.exitCode !== 0) throw new Error(`git worktree add ${baseline}: ${add.stderr.toString()}`);
    cleanup.push(() => Bun.spawnSync(["git", "-C", REPO, "worktree", "remove", "--force", root]));
    symlinkSync(join(REPO, "node_modules"), join(root, "node_modules"));
    trees.unshift({ name: `baseline ${baseline}`, root });
  }
  if (withFloor) trees.push({ name: "floor gateway", root: "floor" });
  return trees;
}

/** Removes a run's data dirs. */
export function removeAll(paths: string[]): void {
  for (const path of paths) rmSync(path, { recursive: true, force: true });
}

/** What a bench runs its trees in: a temporary directory, the data dir template, the trees. */
export interface BenchSetup {
  dir: string;
  template: string;
  trees: BenchTree[];
}

/**
 * Runs `body` beside the zero-delay mock (on core 1), with a template on it and the trees the
 * command line asks for (`--baseline=<revision>`, `--floor`); afterwards undoes it all, in
 * reverse order: the baseline worktree, the mock, the temporary directory.
 */
export async function withBenchTrees(prefix: string, body: (setup: BenchSetup) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const cleanup: (() => void)[] = [() => rmSync(dir, { recursive: true, force: true })];
  try {
    const mock = await startPinned(1, [process.execPath, CHAT_SERVERS, "mock"]);
    cleanup.push(() => mock.proc.kill());
    const trees = benchTrees(dir, benchArg("baseline", ""), process.argv.includes("--floor"), cleanup);
    const template = makeTemplate(dir, mock.port, trees[0]!.root);
    await body({ dir, template, trees });
  } finally {
    for (const step of cleanup.reverse()) step();
  }
}
