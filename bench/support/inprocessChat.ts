/**
 * One run of bench/chat-inprocess.ts: `atelier serve`'s own request handler (server.ts, with
 * its body guard, access log, metrics, and the app behind it) driven in this process with no
 * socket in front of it, against the mock upstream, 64 requests in flight.
 *
 *   bun bench/support/inprocessChat.ts <requests per round> <rounds> <repo root>=<data dir> [<repo root>=<data dir> …]
 *
 * A root of `floor` runs the floor gateway of bench/floor.ts (its step 8) on that data dir instead.
 *
 * Each data dir holds atelier.toml (an `openai` upstream on the mock) and `key`. With several
 * trees, each gets a server of its own in this process (its own modules: a tree's src/ is
 * imported from its own root) and the rounds alternate between them, tree by tree: the host's
 * load, which on the development machine can double a round's time for seconds at a time,
 * falls on every tree alike, and a difference of one or two µs becomes visible. The handler is
 * the one startServer gives Bun.serve (captured here), so each request takes every step a
 * request from a socket takes after Bun has parsed it. Prints one JSON line: per tree, CPU µs
 * per request of each round (user + system of the whole process), and requests that did not
 * answer 200.
 */
import { openSync, readFileSync } from "node:fs";
import { join } from "node:path";

const [perRoundArg, roundsArg, ...treeArgs] = process.argv.slice(2);
if (!perRoundArg || !roundsArg || treeArgs.length === 0) {
  throw new Error("usage: bun bench/support/inprocessChat.ts <requests per round> <rounds> <repo root>=<data dir> …");
}
const perRound = Number(perRoundArg);
const rounds = Number(roundsArg);
const CONCURRENCY = 64;

type Handler = (request: Request, server: unknown) => Promise<Response>;
let captured: { handler: Handler; server: unknown } | undefined;
const serve = Bun.serve;
// The handler startServer gives Bun.serve, and the server it gets back (the handler asks it for timeouts).
(Bun as { serve: unknown }).serve = (options: { fetch: Handler }) => {
  const server = serve(options as Parameters<typeof Bun.serve>[0]);
  captured = { handler: options.fetch, server };
  return server;
};

interface Tree {
  send: (request: Request) => Promise<Response>;
  url: string;
  headers: Record<string, string>;
  stop: () => Promise<void>;
  usPerRequest: number[];
  failed: number;
}

const BODY = JSON.stringify({ model: "mock-chat", messages: [{ role: "user", content: "Rewrite: Red kettle 1.7L stainless" }] });

/** The tree whose server was just started (the handler captured above), called with the data dir's key. */
function capturedTree(dataDir: string, url: string, stop: () => Promise<void>): Tree {
  const { handler, server } = captured!;
  const key = readFileSync(join(dataDir, "key"), "utf8").trim();
  return {
    send: (request) => handler(request, server),
    url,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "content-length": String(BODY.length) },
    stop,
    usPerRequest: [],
    failed: 0,
  };
}

async function startTree(repo: string, dataDir: string): Promise<Tree> {
  const { loadConfig } = (await import(join(repo, "src/config.ts"))) as typeof import("../../src/config");
  const { batchedStdout, createLogger } = (await import(join(repo, "src/logger.ts"))) as typeof import("../../src/logger");
  const { startServer } = (await import(join(repo, "src/server.ts"))) as typeof import("../../src/server");
  const config = loadConfig({ file: join(dataDir, "atelier.toml"), env: {} });
  config.server.data_dir = dataDir;
  config.server.port = 0;
  // The access log goes to a file, as in proxy-compare (logging stays on).
  const sink = batchedStdout(20, 64 * 1024, openSync(join(dataDir, "atelier.log"), "a"));
  const running = await startServer(config, createLogger(sink.write));
  return capturedTree(dataDir, `${running.url}/v1/chat/completions`, async () => {
    await running.stop();
    sink.flush();
  });
}

async function client(tree: Tree, requests: number): Promise<void> {
  for (let i = 0; i < requests; i++) {
    const res = await tree.send(new Request(tree.url, { method: "POST", headers: tree.headers, body: BODY }));
    await res.arrayBuffer();
    if (res.status !== 200) tree.failed++;
  }
}

async function round(tree: Tree, requests: number): Promise<number> {
  const perClient = Math.ceil(requests / CONCURRENCY);
  const before = process.cpuUsage();
  await Promise.all(Array.from({ length: CONCURRENCY }, () => client(tree, perClient)));
  const used = process.cpuUsage(before);
  return (used.user + used.system) / (perClient * CONCURRENCY);
}

/** The floor gateway of bench/floor.ts at its last step, on the same data dir's key and mock. */
async function startFloor(dataDir: string): Promise<Tree> {
  const { loadConfig } = await import("../../src/config");
  const { serveFloor } = await import("./floorGateway");
  const upstream = loadConfig({ file: join(dataDir, "atelier.toml"), env: {} }).upstreams[0]!;
  const stop = serveFloor(8, `${upstream.base_url}/chat/completions`, dataDir);
  return capturedTree(dataDir, "http://127.0.0.1/v1/chat/completions", stop);
}

const trees: Tree[] = [];
for (const arg of treeArgs) {
  const at = arg.indexOf("=");
  const [root, dataDir] = [arg.slice(0, at), arg.slice(at + 1)];
  trees.push(await (root === "floor" ? startFloor(dataDir) : startTree(root, dataDir)));
}
// Warm-up: the JIT, the keep-alive connections to the mock, the heap's first growth.
for (let i = 0; i < 2; i++) for (const tree of trees) await round(tree, Math.min(perRound, 8000));
await callgrind("--zero");
// In turn, and every other round in the reverse order (A B, B A, …): whichever runs second in a
// pair meets the first one's garbage, and the host's load rising or falling within a pair
// weighs on both positions alike.
for (let i = 0; i < rounds; i++) for (const tree of i % 2 === 0 ? trees : trees.toReversed()) tree.usPerRequest.push(await round(tree, perRound));
await callgrind("--dump");
for (const tree of trees) await tree.stop();
console.log(JSON.stringify(trees.map(({ usPerRequest, failed }) => ({ usPerRequest, failed }))));
process.exit(0);

/** Under valgrind's callgrind (bench/chat-instructions.ts): its counters zeroed after the warm-up and dumped after the rounds. */
async function callgrind(command: "--zero" | "--dump"): Promise<void> {
  if (!process.env.ATELIER_CALLGRIND) return;
  const control = Bun.spawn(["callgrind_control", command, String(process.pid)], { stdout: "ignore" });
  await control.exited;
}
