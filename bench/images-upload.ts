/**
 * How the server copes with the largest legal generations request: 10 reference images of
 * 10 MiB each (about 140 MB of JSON). Prints
 *   - time to accept, validate and answer one such request (fast stand-in engine), and the
 *     server's peak RSS (VmHWM) after it;
 *   - a burst of many such requests at once: how many were served, how many were turned away with
 *     429 (in-flight body budget, server.max_inflight_body_bytes) or 413, and the peak RSS, which
 *     stays bounded instead of growing with the number of requests;
 *   - one body over server.max_body_bytes: answered 413 without reading it.
 * Run: bun bench/images-upload.ts [burst=16]
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MAX_IMAGE_BYTES } from "../src/core/limits";
import { encodePng } from "../src/core/image/codec";

const BURST = Number(process.argv[2] ?? 16);
const MiB = 1024 * 1024;

function rssOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), peak: kb("VmHWM") };
}

/** Resets VmHWM so each phase reports its own peak (Linux: write 5 to clear_refs). */
function resetPeak(pid: number): void {
  try {
    require("node:fs").writeFileSync(`/proc/${pid}/clear_refs`, "5");
  } catch {
    // Not permitted here: peaks are then cumulative, which the output says.
  }
}

const fmt = (n: number) => `${(n / MiB).toFixed(0)} MiB`;

// An image of exactly 10 MiB: a real PNG header (so sniffing and dimensions pass) padded to the limit.
const header = encodePng({ width: 256, height: 256, data: new Uint8Array(256 * 256 * 4) });
const image = new Uint8Array(MAX_IMAGE_BYTES);
image.set(header);
const url = `data:image/png;base64,${Buffer.from(image).toString("base64")}`;
const body = new TextEncoder().encode(JSON.stringify({ prompt: "bench", size: "64x64", reference_images: Array(10).fill(url) }));

const dataDir = mkdtempSync(join(tmpdir(), "atelier-bench-"));
const child = Bun.spawn(["bun", "bench/images-upload-server.ts", dataDir], { stdout: "pipe", stderr: "inherit" });
const reader = child.stdout.getReader();
let first = "";
while (!first.includes("\n")) {
  const { done, value } = await reader.read();
  if (done) throw new Error("bench server exited");
  first += new TextDecoder().decode(value);
}
const info = JSON.parse(first.split("\n")[0]!) as { url: string; key: string; pid: number; max_body_bytes: number; max_inflight_body_bytes: number };
const send = (b: Uint8Array<ArrayBuffer>) =>
  fetch(`${info.url}/v1/images/generations`, {
    method: "POST",
    headers: { authorization: `Bearer ${info.key}`, "content-type": "application/json" },
    body: b,
  });

try {
  console.log(`request body: ${fmt(body.byteLength)} (${body.byteLength} bytes), 10 reference images of ${MAX_IMAGE_BYTES} bytes`);
  console.log(`server limits: max_body_bytes=${fmt(info.max_body_bytes)}, max_inflight_body_bytes=${fmt(info.max_inflight_body_bytes)}`);
  console.log(`server RSS at rest: ${fmt(rssOf(info.pid).rss)}`);

  const times: number[] = [];
  resetPeak(info.pid);
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    const res = await send(body);
    await res.arrayBuffer();
    times.push(performance.now() - t0);
    if (res.status !== 200) throw new Error(`single request answered ${res.status}`);
  }
  times.sort((a, b) => a - b);
  console.log(`one request (accept + validate 10 x 10 MiB + answer): median ${times[1]!.toFixed(0)} ms (min ${times[0]!.toFixed(0)}, max ${times[2]!.toFixed(0)}); server peak RSS ${fmt(rssOf(info.pid).peak)}`);

  resetPeak(info.pid);
  const t0 = performance.now();
  const statuses = await Promise.all(Array.from({ length: BURST }, () => send(body).then(async (r) => (await r.arrayBuffer(), r.status))));
  const elapsed = performance.now() - t0;
  const counts = statuses.reduce<Record<number, number>>((m, s) => ((m[s] = (m[s] ?? 0) + 1), m), {});
  const { rss, peak } = rssOf(info.pid);
  console.log(`burst of ${BURST} at once: ${JSON.stringify(counts)} in ${elapsed.toFixed(0)} ms; server peak RSS ${fmt(peak)} (unbounded would need ~${fmt(BURST * body.byteLength)} of bodies alone); RSS after ${fmt(rss)}`);

  const huge = new Uint8Array(info.max_body_bytes + 1);
  const t1 = performance.now();
  const over = await send(huge);
  console.log(`one body of max_body_bytes + 1: ${over.status} in ${(performance.now() - t1).toFixed(0)} ms`);
} finally {
  child.kill("SIGTERM");
  await child.exited;
  rmSync(dataDir, { recursive: true, force: true });
}
