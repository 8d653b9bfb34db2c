/**
 * Does the server stay responsive while it decodes big images? Starts the real server as its
 * own process (bench/images-upload-server.ts: the real request path with a fast stand-in
 * engine, so a generation costs its input checks, i.e. the full decode of its reference image),
 * then times /healthz and a chat request, one at a time, twice:
 *   - idle: nothing else running;
 *   - load: four generations at a time, each with a 25-megapixel PNG reference image of under
 *     100 KB (about 100 MB of RGBA and half a second of decoding each), kept up for the phase.
 * Prints p50/p99/max latencies side by side, the decodes completed, and the server's peak RSS.
 *
 *   bun bench/decode-responsiveness.ts [--seconds 8] [--baseline <dir>]
 *
 * --baseline runs the same phases against a second checkout (e.g. the commit before the decode
 * pool: `git archive <commit> | tar -x -C <dir>` and link node_modules into it), so both trees
 * are measured in the same run on the same machine.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { deflateSync } from "node:zlib";

const args = process.argv.slice(2);
const option = (name: string) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? args[at + 1] : undefined;
};
const SECONDS = Number(option("seconds") ?? 8);
const BASELINE = option("baseline");
const CONCURRENT_DECODES = 4;
const MiB = 1024 * 1024;

/** 5000x5000 RGB: a gradient first row, then every row the same (filter Up: all zeros). */
function bigPng(): Uint8Array {
  const side = 5000;
  const rowBytes = 1 + side * 3;
  const raw = new Uint8Array(rowBytes * side);
  raw[0] = 0;
  for (let x = 0; x < side; x++) raw.set([(x * 255) / side, 120, 255 - (x * 255) / side], 1 + x * 3);
  for (let y = 1; y < side; y++) raw[y * rowBytes] = 2; // Up
  const ihdr = new Uint8Array(13);
  new DataView(ihdr.buffer).setUint32(0, side);
  new DataView(ihdr.buffer).setUint32(4, side);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const chunk = (type: string, body: Uint8Array) => {
    const out = new Uint8Array(12 + body.length);
    const v = new DataView(out.buffer);
    v.setUint32(0, body.length);
    out.set(new TextEncoder().encode(type), 4);
    out.set(body, 8);
    v.setUint32(8 + body.length, Bun.hash.crc32(out.subarray(4, 8 + body.length)));
    return out;
  };
  const parts = [new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr), chunk("IDAT", new Uint8Array(deflateSync(raw, { level: 9 }))), chunk("IEND", new Uint8Array(0))];
  return new Uint8Array(Buffer.concat(parts));
}

interface Info {
  url: string;
  key: string;
  pid: number;
}

async function startServer(root: string, dataDir: string): Promise<{ info: Info; child: ReturnType<typeof Bun.spawn> }> {
  // Four decodes at once need four gate slots for one user.
  const toml = join(dataDir, "atelier.toml");
  writeFileSync(toml, "[limits]\ngeneration_concurrency = 8\nper_user_concurrency = 8\nqueue_size = 64\n");
  const child = Bun.spawn(["bun", join(root, "bench/images-upload-server.ts"), dataDir], {
    cwd: root,
    env: { ...process.env, ATELIER_CONFIG: toml },
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = (child.stdout as ReadableStream<Uint8Array>).getReader();
  let first = "";
  while (!first.includes("\n")) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`bench server in ${root} exited`);
    first += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { info: JSON.parse(first.split("\n")[0]!) as Info, child };
}

function peakRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

interface Latencies {
  healthz: number[];
  chat: number[];
}

/** Times /healthz and a chat completion alternately, one request at a time, until `stop`. */
async function probe(info: Info, stop: () => boolean): Promise<Latencies> {
  const out: Latencies = { healthz: [], chat: [] };
  const chatBody = JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "say something short" }] });
  while (!stop()) {
    let t = performance.now();
    const h = await fetch(`${info.url}/healthz`);
    await h.arrayBuffer();
    out.healthz.push(performance.now() - t);
    t = performance.now();
    const c = await fetch(`${info.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${info.key}`, "content-type": "application/json" },
      body: chatBody,
    });
    await c.arrayBuffer();
    if (!c.ok) throw new Error(`chat answered ${c.status}`);
    out.chat.push(performance.now() - t);
    await Bun.sleep(5);
  }
  return out;
}

interface Run {
  idle: Latencies;
  load: Latencies;
  decodes: number;
  decodeMs: number[];
  peak: number;
}

async function measure(root: string, reference: string): Promise<Run> {
  const dataDir = mkdtempSync(join(tmpdir(), "atelier-bench-decode-"));
  const { info, child } = await startServer(root, dataDir);
  try {
    // Warm up: one decode (starts the decode workers where there are any) and a few probes.
    await generate(info, reference);
    let until = performance.now() + 500;
    await probe(info, () => performance.now() > until);

    until = performance.now() + SECONDS * 1000;
    const idle = await probe(info, () => performance.now() > until);

    let stopping = false;
    const decodeMs: number[] = [];
    const loaders = Array.from({ length: CONCURRENT_DECODES }, async () => {
      while (!stopping) {
        const t = performance.now();
        await generate(info, reference);
        decodeMs.push(performance.now() - t);
      }
    });
    await Bun.sleep(200); // let the first decodes start
    until = performance.now() + SECONDS * 1000;
    const load = await probe(info, () => performance.now() > until);
    stopping = true;
    await Promise.all(loaders);
    return { idle, load, decodes: decodeMs.length, decodeMs, peak: peakRss(info.pid) };
  } finally {
    child.kill("SIGTERM");
    await child.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function generate(info: Info, reference: string): Promise<void> {
  const res = await fetch(`${info.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${info.key}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "bench", size: "64x64", reference_images: [reference] }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`generation answered ${res.status}: ${text.slice(0, 300)}`);
}

const png = bigPng();
const reference = `data:image/png;base64,${Buffer.from(png).toString("base64")}`;
console.log(`reference image: 5000x5000 RGB PNG, ${(png.length / 1024).toFixed(0)} KB (${((5000 * 5000 * 4) / MiB).toFixed(0)} MiB as RGBA)`);
console.log(`${CONCURRENT_DECODES} generations at a time during "load"; ${SECONDS} s per phase; probes are sequential\n`);

const runs: [string, Run][] = [["this tree", await measure(resolve(import.meta.dir, ".."), reference)]];
if (BASELINE) runs.push([`baseline (${BASELINE})`, await measure(resolve(BASELINE), reference)]);

const ms = (n: number) => `${n.toFixed(1).padStart(7)} ms`;
for (const [name, run] of runs) {
  console.log(`== ${name}`);
  console.log(`${"".padEnd(18)}${"p50".padStart(10)}${"p99".padStart(10)}${"max".padStart(10)}   n`);
  for (const [phase, lat] of [["idle", run.idle], ["load", run.load]] as const) {
    for (const kind of ["healthz", "chat"] as const) {
      const sorted = [...lat[kind]].sort((a, b) => a - b);
      console.log(`${`${kind} ${phase}`.padEnd(18)}${ms(percentile(sorted, 50))}${ms(percentile(sorted, 99))}${ms(sorted.at(-1) ?? Number.NaN)}   ${sorted.length}`);
    }
  }
  const d = [...run.decodeMs].sort((a, b) => a - b);
  console.log(`generations with the 25 MP reference: ${run.decodes} in the load phase, p50 ${d.length ? ms(percentile(d, 50)).trim() : "-"}; server peak RSS ${(run.peak / MiB).toFixed(0)} MiB\n`);
}
