/**
 * A small JSON body read and parsed, the three ways side by side in one process (rounds
 * alternating, best rounds printed): as bytes (a view, our own decode, the depth check,
 * JSON.parse: parseJsonBody, the small-body reader before the eleventh pass and the large-body
 * path still), as text (Bun decodes natively, the depth check, JSON.parse: the small-body reader
 * now), and `request.json()` (no depth check: the floor gateway's, for reference).
 * Each includes making the Request, as a socket would have.
 *
 *   bun bench/small-json-read.ts [--requests=50000] [--rounds=8]
 */
import { parseJsonBody } from "../src/http/body";
import { jsonNestedDeeperThan } from "../src/http/jsonDepth";
import { MAX_JSON_DEPTH } from "../src/core/limits";
import { benchArg } from "./support/chatBench";

const requests = Number(benchArg("requests", "50000"));
const rounds = Number(benchArg("rounds", "8"));

const BODY = JSON.stringify({ model: "mock-chat", messages: [{ role: "user", content: "Rewrite: Red kettle 1.7L stainless" }] });
const headers = { "content-type": "application/json", "content-length": String(BODY.length) };
const request = () => new Request("http://127.0.0.1/v1/chat/completions", { method: "POST", headers, body: BODY });

const ways: Record<string, (r: Request) => Promise<unknown>> = {
  "bytes (before)": async (r) => parseJsonBody(new Uint8Array(await r.arrayBuffer())),
  "text (now)": async (r) => {
    const text = await r.text();
    if (jsonNestedDeeperThan(text, MAX_JSON_DEPTH)) throw new Error("too deep");
    return JSON.parse(text);
  },
  "request.json() (floor)": (r) => r.json(),
};

const perRequest = new Map<string, number[]>(Object.keys(ways).map((k) => [k, []]));
for (let round = 0; round < rounds; round++) {
  for (const [name, read] of Object.entries(ways)) {
    const started = performance.now();
    for (let i = 0; i < requests; i++) await read(request());
    perRequest.get(name)!.push(((performance.now() - started) * 1000) / requests);
  }
}
console.log(`${rounds} rounds × ${requests} requests each, alternating; µs per request (the best half of the rounds):`);
const best = (us: number[]) => us.toSorted((a, b) => a - b).slice(0, Math.max(1, Math.floor(us.length / 2)));
const mean = (us: number[]) => us.reduce((a, b) => a + b, 0) / us.length;
const before = mean(best(perRequest.get("bytes (before)")!));
for (const [name, us] of perRequest) {
  const m = mean(best(us));
  console.log(`  ${name.padEnd(24)} ${m.toFixed(2)} µs   ${(m / before).toFixed(2)}× bytes`);
}
