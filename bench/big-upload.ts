/**
 * Big uploads through the real server and the real built-in engine (issue 15), each figure
 * printed beside the same figure for a baseline source tree in the same run:
 *   - JSON: one /v1/images/generations request with ten reference images of about 8.8 MB
 *     (noise PNGs, so they cannot be compressed away: about 118 MB of JSON): time to answer
 *     (median of 3), the server's CPU time for it (all threads; unlike the time, it hardly
 *     depends on what else the machine runs) and its peak RSS growth over the RSS just before,
 *     also as a multiple of the body;
 *   - multipart: the same ten images as `image[]` parts of one /v1/images/edits request;
 *   - a burst of 16 JSON requests at once: statuses, time, the server's peak RSS.
 * The server runs in its own process (bench/big-upload-server.ts) so its memory is its own; peaks
 * are VmHWM, reset between phases through /proc/<pid>/clear_refs.
 *
 * Run: bun bench/big-upload.ts [--baseline=<git ref>] [--burst=16]
 * With --baseline, that commit's src/ is exported (git archive) into a temporary directory that
 * shares this checkout's node_modules, and measured first.
 */
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { encodePng } from "../src/core/image/codec";

const args = Object.fromEntries(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=") as [string, string]));
const BURST = Math.min(64, Number(args.burst ?? 16));
const IMAGES = 10;
const TARGET_BODY = 118_000_000;
const MiB = 1024 * 1024;
const here = resolve(import.meta.dir, "..");

function rssOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), peak: kb("VmHWM") };
}

/** CPU time of the process, all threads (workers, Bun's native image threads) included, in ms. */
function cpuMsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  // utime and stime: fields 14 and 15 of stat, 12 and 13 after the command name.
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** Resets VmHWM to the current RSS, so each phase reports its own peak. */
function resetPeak(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
}

/**
 * A PNG of RGB noise under an opaque alpha channel, encoded as the server encodes (Sub filter,
 * zlib): it cannot be compressed away, so its size is what it costs to check and to decode.
 */
function noisePng(width: number, height: number, seed: number): Uint8Array<ArrayBuffer> {
  const data = new Uint8Array(width * height * 4);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < data.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    data[i] = i % 4 === 3 ? 255 : x & 255;
  }
  return new Uint8Array(encodePng({ width, height, data }));
}

// Ten images whose base64 JSON adds up to about TARGET_BODY bytes (RGB noise under opaque alpha:
// about 3.42 bytes a pixel after compression). Two distinct pictures, alternating: encoding ten would take longer than the bench.
const side = Math.floor(Math.sqrt(((TARGET_BODY / IMAGES) * 3) / 4 / 3.42));
const distinct = [noisePng(side, side, 1), noisePng(side, side, 2)];
const images = Array.from({ length: IMAGES }, (_, i) => distinct[i % 2]!);
const jsonBody = new TextEncoder().encode(
  JSON.stringify({ prompt: "a lighthouse at dusk", size: "256x256", reference_images: images.map((b) => `data:image/png;base64,${Buffer.from(b).toString("base64")}`) }),
);
function multipartBody(): FormData {
  const form = new FormData();
  form.set("prompt", "a lighthouse at dusk");
  for (const [i, b] of images.entries()) form.append("image[]", new File([b], `ref${i}.png`, { type: "image/png" }));
  return form;
}
const multipartResponse = new Response(multipartBody());
const multipartType = multipartResponse.headers.get("content-type")!;
const multipartBytes = new Uint8Array(await multipartResponse.arrayBuffer());

const fmt = (n: number) => `${(n / MiB).toFixed(0)} MiB`;

interface Figures {
  restRss: number;
  jsonMs: number[];
  jsonCpuMs: number;
  jsonGrowth: number;
  multipartMs: number[];
  multipartCpuMs: number;
  multipartGrowth: number;
  burst: Record<number, number>;
  burstMs: number;
  burstPeakGrowth: number;
  burstPeak: number;
}

async function measure(root: string): Promise<Figures> {
  const dataDir = mkdtempSync(join(tmpdir(), "atelier-big-upload-"));
  const child = Bun.spawn(["bun", join(here, "bench/big-upload-server.ts"), root, dataDir], { stdout: "pipe", stderr: "inherit" });
  try {
    const reader = child.stdout.getReader();
    let first = "";
    while (!first.includes("\n")) {
      const { done, value } = await reader.read();
      if (done) throw new Error("bench server exited");
      first += new TextDecoder().decode(value);
    }
    const info = JSON.parse(first.split("\n")[0]!) as { url: string; key: string; pid: number };
    const post = (path: string, body: Uint8Array<ArrayBuffer>, contentType: string) =>
      fetch(`${info.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${info.key}`, "content-type": contentType }, body });
    const json = () => post("/v1/images/generations", jsonBody, "application/json");
    const multipart = () => post("/v1/images/edits", multipartBytes, multipartType);

    // Warm up (workers, WASM, JIT) with one of each; its peak is not reported.
    for (const send of [json, multipart]) {
      const r = await send();
      if (r.status !== 200) throw new Error(`warm-up answered ${r.status}: ${await r.text()}`);
      await r.arrayBuffer();
    }
    Bun.gc(true);
    await Bun.sleep(500);
    const restRss = rssOf(info.pid).rss;

    async function timed(send: () => Promise<Response>): Promise<{ ms: number[]; cpuMs: number; growth: number }> {
      const ms: number[] = [];
      const cpu: number[] = [];
      let growth = 0;
      for (let i = 0; i < 3; i++) {
        await Bun.sleep(300);
        const before = rssOf(info.pid).rss;
        resetPeak(info.pid);
        const cpu0 = cpuMsOf(info.pid);
        const t0 = performance.now();
        const res = await send();
        await res.arrayBuffer();
        ms.push(performance.now() - t0);
        cpu.push(cpuMsOf(info.pid) - cpu0);
        if (res.status !== 200) throw new Error(`answered ${res.status}`);
        growth = Math.max(growth, rssOf(info.pid).peak - before);
      }
      return { ms: ms.sort((a, b) => a - b), cpuMs: cpu.sort((a, b) => a - b)[1]!, growth };
    }
    const j = await timed(json);
    const m = await timed(multipart);

    await Bun.sleep(300);
    const before = rssOf(info.pid).rss;
    resetPeak(info.pid);
    const t0 = performance.now();
    const statuses = await Promise.all(Array.from({ length: BURST }, () => json().then(async (r) => (await r.arrayBuffer(), r.status))));
    const burstMs = performance.now() - t0;
    const burst = statuses.reduce<Record<number, number>>((acc, s) => ((acc[s] = (acc[s] ?? 0) + 1), acc), {});
    const peak = rssOf(info.pid).peak;
    return { restRss, jsonMs: j.ms, jsonCpuMs: j.cpuMs, jsonGrowth: j.growth, multipartMs: m.ms, multipartCpuMs: m.cpuMs, multipartGrowth: m.growth, burst, burstMs, burstPeakGrowth: peak - before, burstPeak: peak };
  } finally {
    child.kill("SIGTERM");
    await child.exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** A commit's source tree next to this checkout's dependencies. */
function exportTree(ref: string): string {
  const dir = mkdtempSync(join(tmpdir(), "atelier-baseline-"));
  const tar = Bun.spawnSync(["git", "-C", here, "archive", ref, "src", "package.json", "tsconfig.json"], { stdout: "pipe" });
  if (tar.exitCode !== 0) throw new Error(`git archive ${ref} failed`);
  Bun.spawnSync(["tar", "-x", "-C", dir], { stdin: tar.stdout });
  symlinkSync(join(here, "node_modules"), join(dir, "node_modules"));
  return dir;
}

const ms = (xs: number[]) => `${xs[1]!.toFixed(0)} ms (${xs[0]!.toFixed(0)}–${xs[2]!.toFixed(0)})`;
const times = (n: number, body: number) => `${fmt(n)} (${(n / body).toFixed(2)}× body)`;
function rows(f: Figures): string[] {
  return [
    fmt(f.restRss),
    ms(f.jsonMs),
    `${f.jsonCpuMs.toFixed(0)} ms`,
    times(f.jsonGrowth, jsonBody.byteLength),
    ms(f.multipartMs),
    `${f.multipartCpuMs.toFixed(0)} ms`,
    times(f.multipartGrowth, multipartBytes.byteLength),
    `${JSON.stringify(f.burst)} in ${(f.burstMs / 1000).toFixed(1)} s`,
    `${fmt(f.burstPeak)} (+${fmt(f.burstPeakGrowth)})`,
  ];
}
const labels = [
  "server RSS at rest (after warm-up)",
  "JSON generation, 10 references: time (median, min–max of 3)",
  "  server CPU time, all threads (median)",
  "  peak RSS growth",
  "multipart edit, 10 images: time",
  "  server CPU time, all threads (median)",
  "  peak RSS growth",
  `burst of ${BURST} JSON requests at once: statuses`,
  "  server peak RSS (growth)",
];

console.log(`machine: ${navigator.hardwareConcurrency} cores, ${readFileSync("/proc/cpuinfo", "utf8").match(/model name\s*:\s*(.*)/)?.[1] ?? "?"}, Bun ${Bun.version}`);
console.log(`JSON body ${(jsonBody.byteLength / 1e6).toFixed(1)} MB (${IMAGES} noise PNGs of ${side}x${side}, ${(images[0]!.byteLength / 1e6).toFixed(2)} MB each); multipart body ${(multipartBytes.byteLength / 1e6).toFixed(1)} MB`);
const columns: [string, Figures][] = [];
let baselineDir: string | undefined;
try {
  if (args.baseline) {
    baselineDir = exportTree(args.baseline);
    columns.push([`baseline ${args.baseline}`, await measure(baselineDir)]);
  }
  columns.push(["this tree", await measure(here)]);
} finally {
  if (baselineDir) rmSync(baselineDir, { recursive: true, force: true });
}
const table = labels.map((label, i) => [label, ...columns.map(([, f]) => rows(f)[i]!)]);
console.log(`| | ${columns.map(([name]) => name).join(" | ")} |`);
console.log(`| --- |${columns.map(() => " --- |").join("")}`);
for (const row of table) console.log(`| ${row.join(" | ")} |`);
