/**
 * Chat completions through a real listening server with builtin-chat: what the route itself
 * costs (auth, body parsing, validation, gate, history row), since the engine is near-free.
 *
 *   bun bench/chat.ts [requests=2000] [concurrency=8]
 *
 * Prints requests/s and latency percentiles for a small request, a 60000-character request
 * (the largest allowed) and a json_schema request, plus how many 429s the chat gate gave.
 */
import { startTestServer } from "../test/support/server";

const total = Number(process.argv[2] ?? 2000);
const concurrency = Number(process.argv[3] ?? 8);

const server = await startTestServer({ config: (c) => { c.server.log_requests = false; c.limits.chat_concurrency = concurrency; } });
const { key } = await server.userWithKey();
const url = `${server.url}/v1/chat/completions`;
const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };

const cases: Record<string, unknown> = {
  small: { model: "builtin-chat", messages: [{ role: "user", content: "Rewrite: Red kettle 1.7L stainless" }] },
  "60000 chars": {
    model: "builtin-chat",
    messages: Array.from({ length: 40 }, (_, i) => ({ role: i % 2 === 1 ? "user" : "assistant", content: "x".repeat(1500) })),
  },
  json_schema: {
    model: "builtin-chat",
    messages: [{ role: "user", content: "Describe the kettle" }],
    response_format: {
      type: "json_schema",
      json_schema: { name: "p", schema: { type: "object", properties: { title: { type: "string" }, tags: { type: "array", items: { type: "string" } }, price: { type: "number" } }, required: ["title", "tags", "price"] } },
    },
  },
};

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

for (const [name, body] of Object.entries(cases)) {
  const payload = JSON.stringify(body);
  const latencies: number[] = [];
  const statuses = new Map<number, number>();
  let next = 0;
  const worker = async () => {
    while (next < total) {
      next++;
      const t0 = performance.now();
      const res = await fetch(url, { method: "POST", headers, body: payload });
      await res.arrayBuffer();
      latencies.push(performance.now() - t0);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  console.log(
    `${name.padEnd(12)} ${String(payload.length).padStart(6)} B  ${(total / seconds).toFixed(0).padStart(6)} req/s  ` +
      `p50 ${pct(latencies, 50).toFixed(2)} ms  p99 ${pct(latencies, 99).toFixed(2)} ms  statuses ${JSON.stringify(Object.fromEntries(statuses))}`,
  );
}

const rows = await server.services.store.requests.count({ kind: "chat" });
console.log(`history rows written: ${rows} (one per answered request)`);
await server.close();
