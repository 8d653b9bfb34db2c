/**
 * What writing one image to the file archive costs every other request: the longest gap of a
 * 1 ms interval timer (the event loop's stall) while images are written, the archive's own
 * FileImageBlobs.write (temp file, write, fsync, rename, fsync of the folder, all through
 * node:fs/promises) beside the same steps done with the synchronous calls (how it wrote before
 * the fifteenth pass), in one process, alternating, on the data dir's filesystem.
 *
 *   bun bench/archive-write.ts [--dir=<a folder on the disk to measure>] [--mib=4] [--writes=10]
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { FileImageBlobs } from "../src/store/imageFiles";
import { benchArg, median } from "./support/chatBench";

const root = mkdtempSync(join(benchArg("dir", process.cwd()), ".archive-write-"));
const bytes = new Uint8Array(Number(benchArg("mib", "4")) * 1024 * 1024).map((_, i) => (i * 2654435761) >>> 24);
const writes = Number(benchArg("writes", "10"));
const blobs = new FileImageBlobs(join(root, "async"));

function syncWrite(i: number): void {
  const tmp = join(root, `sync-${i}.tmp`);
  const fd = openSync(tmp, "wx", 0o600);
  let written = 0;
  while (written < bytes.byteLength) written += writeSync(fd, bytes, written);
  fsyncSync(fd);
  closeSync(fd);
  renameSync(tmp, join(root, `sync-${i}.png`));
  const dir = openSync(root, "r");
  fsyncSync(dir);
  closeSync(dir);
}

/** The longest stall of the event loop while `write` runs, in ms. */
async function stallOf(write: () => Promise<void> | void): Promise<number> {
  let worst = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last);
    last = now;
  }, 1);
  await Bun.sleep(5);
  worst = 0;
  last = performance.now();
  await write();
  await Bun.sleep(5);
  clearInterval(timer);
  return worst;
}

const stalls = { "synchronous calls (before)": [] as number[], "FileImageBlobs.write (now)": [] as number[] };
try {
  for (let i = 0; i < writes; i++) {
    stalls["synchronous calls (before)"].push(await stallOf(() => syncWrite(i)));
    stalls["FileImageBlobs.write (now)"].push(await stallOf(() => blobs.write(`ab/cd/${i}.png`, bytes)));
  }
  console.log(`${writes} writes of ${bytes.byteLength / 1048576} MiB each under ${root}: the event loop's longest stall per write (ms)`);
  for (const [name, ms] of Object.entries(stalls)) console.log(`  ${name.padEnd(28)} median ${median(ms).toFixed(1)}   max ${Math.max(...ms).toFixed(1)}`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
