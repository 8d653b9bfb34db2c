/**
 * Crash recovery with the real server process: a generation is charged and waiting on a slow
 * upstream (a loopback fake that never answers), the process is killed with SIGKILL, and after a
 * restart the credit is back and the request is recorded as `interrupted`.
 */
import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { addUser, createKey } from "../../src/core/accounts";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { tempDir } from "../support/tempDirs";
import { until } from "../support/until";

const dataDir = tempDir("atelier-crash-");
const procs: Subprocess[] = [];
let upstreamCalls = 0;
// A fake OpenAI-compatible upstream that accepts the image request and never answers it.
const upstream = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch() {
    upstreamCalls++;
    return new Promise<Response>(() => {});
  },
});

afterAll(async () => {
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill(9);
  await Promise.all(procs.map((p) => p.exited));
  upstream.stop(true);
  rmSync(dataDir, { recursive: true, force: true });
});

const configFile = join(dataDir, "atelier.toml");
writeFileSync(
  configFile,
  `
[[upstreams]]
id = "slowpoke"
kind = "openai"
base_url = "http://127.0.0.1:${upstream.port}/v1"
timeout_ms = 600000
max_attempts = 1
[[upstreams.accounts]]
id = "only"
api_key = "sk-fake-upstream"

[[models]]
id = "slow-image"
kind = "image"
upstream = "slowpoke"
`,
);

/** Starts `atelier serve` on port 0 and resolves with its URL from the "listening" log line. */
async function spawnServer(): Promise<{ proc: Subprocess<"ignore", "pipe", "pipe">; url: string; lines: string[] }> {
  const proc = Bun.spawn(["bun", "src/main.ts", "serve", "--config", configFile, "--data", dataDir, "--port", "0", "--host", "127.0.0.1"], {
    cwd: join(import.meta.dir, "..", ".."),
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, ATELIER_CONFIG: "" },
  });
  procs.push(proc);
  const lines: string[] = [];
  const reader = proc.stdout.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const { done, value } = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, { stream: true });
    const parts = buffered.split("\n");
    buffered = parts.pop()!;
    for (const line of parts) {
      lines.push(line);
      const entry = JSON.parse(line) as { msg: string; url?: string };
      if (entry.msg === "listening") {
        // Keep draining stdout so the child never blocks on a full pipe.
        void (async () => {
          for (;;) {
            const r = await reader.read().catch(() => ({ done: true, value: undefined }));
            if (r.done) return;
            lines.push(...decoder.decode(r.value).split("\n").filter(Boolean));
          }
        })();
        return { proc, url: entry.url!, lines };
      }
    }
  }
  throw new Error(`the server did not start: ${lines.join("\n")}\n${await new Response(proc.stderr).text()}`);
}

async function readState(userId: number) {
  const store = createStore(openDatabase(dataDir), latestVersion());
  try {
    return {
      balance: await store.credits.balance(userId),
      ledgerSum: await store.credits.ledgerSum(userId),
      requests: await store.requests.list({ userId }),
    };
  } finally {
    await store.close();
  }
}

test("a generation interrupted by kill -9 is refunded at the next start and marked interrupted", async () => {
  // A user and key, made the way the CLI makes them, before the server starts.
  const setup = createStore(openDatabase(dataDir), latestVersion());
  const user = await addUser(setup, Date.now, { email: "crash@example.com", credits: 3 });
  const { key } = await createKey(setup, Date.now, user.id, "crash");
  await setup.close();

  const first = await spawnServer();
  const pending = fetch(`${first.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${key.secret}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "slow-image", prompt: "never finishes" }),
  }).catch((e: Error) => e);
  await until(() => upstreamCalls >= 1, "the upstream to receive the generation", 20_000);

  const during = await readState(user.id);
  expect(during.balance).toBe(2);
  expect(during.requests[0]).toMatchObject({ status: "pending", credits_charged: 1 });

  first.proc.kill(9);
  await first.proc.exited;
  expect(await pending).toBeInstanceOf(Error);

  const second = await spawnServer();
  expect(second.lines.some((l) => l.includes("refunded requests interrupted by a previous stop"))).toBe(true);
  const after = await readState(user.id);
  expect(after.balance).toBe(3);
  expect(after.ledgerSum).toBe(3);
  expect(after.requests[0]).toMatchObject({ status: "interrupted", error_code: "interrupted", credits_charged: 1, credits_refunded: 1 });

  second.proc.kill("SIGTERM");
  await second.proc.exited;
}, 60_000);
