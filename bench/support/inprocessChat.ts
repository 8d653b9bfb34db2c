/**
 * One side of bench/chat-inprocess.ts: `atelier serve`'s own request handler (server.ts, with
 * its body guard, access log, metrics, and the app behind it) driven in this process with no
 * socket in front of it, against the mock upstream, 64 requests in flight.
 *
 *   bun bench/support/inprocessChat.ts <repo root> <data dir> <requests per round> <rounds>
 *
 * The data dir holds atelier.toml (an `openai` upstream on the mock) and `key`. The handler is
 * the one startServer gives Bun.serve (captured here), so each request takes every step a
 * request from a socket takes after Bun has parsed it. Prints one JSON line: CPU µs per request
 * of each round (user + system of the whole process), and requests that did not answer 200.
 */
import { openSync, readFileSync } from "node:fs";
import { join } from "node:path";

const [repo, dataDir, perRoundArg, roundsArg] = process.argv.slice(2);
if (!repo || !dataDir) throw new Error("usage: bun bench/support/inprocessChat.ts <repo root> <data dir> [requests per round] [rounds]");
const perRound = Number(perRoundArg ?? 16_000);
const rounds = Number(roundsArg ?? 5);
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

const { loadConfig } = (await import(join(repo, "src/config.ts"))) as typeof import("../../src/config");
const { batchedStdout, createLogger } = (await import(join(repo, "src/logger.ts"))) as typeof import("../../src/logger");
const { startServer } = (await import(join(repo, "src/server.ts"))) as typeof import("../../src/server");

const config = loadConfig({ file: join(dataDir, "atelier.toml"), env: {} });
config.server.data_dir = dataDir;
config.server.port = 0;
// The access log goes to a file, as in proxy-compare (logging stays on).
const sink = batchedStdout(20, 64 * 1024, openSync(join(dataDir, "atelier.log"), "a"));
const running = await startServer(config, createLogger(sink.write));
const { handler, server } = captured!;
const key = readFileSync(join(dataDir, "key"), "utf8").trim();
const body = JSON.stringify({ model: "mock-chat", messages: [{ role: "user", content: "Rewrite: Red kettle 1.7L stainless" }] });
const headers = { authorization: `Bearer ${key}`, "content-type": "application/json", "content-length": String(body.length) };
const url = `${running.url}/v1/chat/completions`;
let failed = 0;

async function client(requests: number): Promise<void> {
  for (let i = 0; i < requests; i++) {
    const res = await handler(new Request(url, { method: "POST", headers, body }), server);
    await res.arrayBuffer();
    if (res.status !== 200) failed++;
  }
}

async function round(requests: number): Promise<number> {
  const before = process.cpuUsage();
  await Promise.all(Array.from({ length: CONCURRENCY }, () => client(Math.ceil(requests / CONCURRENCY))));
  const used = process.cpuUsage(before);
  return (used.user + used.system) / (Math.ceil(requests / CONCURRENCY) * CONCURRENCY);
}

// Warm-up: the JIT, the keep-alive connections to the mock, the heap's first growth.
for (let i = 0; i < 2; i++) await round(Math.min(perRound, 8000));
const usPerRequest: number[] = [];
for (let i = 0; i < rounds; i++) usPerRequest.push(await round(perRound));
await running.stop();
sink.flush();
console.log(JSON.stringify({ usPerRequest, failed }));
process.exit(0);
