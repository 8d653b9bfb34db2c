/**
 * Why no long-lived Set or Map on the request path may keep what a finished request put in it.
 *
 *   bun bench/gc-churn.ts [seconds=3]
 *
 * Measured in Bun 1.4.5 (JavaScriptCore): an entry deleted from a Set or Map that has lived
 * through a collection still holds what it referenced through the next young-generation
 * collection, which promotes it as garbage for a full one to free. A request path that adds an
 * entry per request and deletes it when the request ends (a watch list, an index of queued
 * rows) thus promotes every request's objects. The script runs the same loop of "requests"
 * (an object of about 5 KB each, 64 alive at a time) in a child process with the collector's log
 * on (BUN_JSC_logGC=1), in turn:
 *   none      no container: the baseline;
 *   set       each request added to a long-lived Set and deleted when it ends;
 *   cleared   the same, and the deleted entry's reference to the request's objects cleared;
 *   deleted   each finished request queued in a long-lived Map by id, and every 256 requests
 *             the queue "written": its entries deleted one by one;
 *   rebuilt   the same queue, replaced by a new Map when written instead of deleted from (what
 *             store/requests does with its queued chat rows).
 * and prints, from the log, the collections, the heap promoted per young collection and the pauses.
 */
import { formatGc, summarizeGcLog } from "./support/gcLog";

const MODES = ["none", "set", "cleared", "deleted", "rebuilt"] as const;
const BATCH = 256;
type Mode = (typeof MODES)[number];
const IN_FLIGHT = 64;

if (process.argv[2] === "--child") churn(process.argv[3] as Mode, Number(process.argv[4]));
else await compare(Number(process.argv[2] ?? 3));

async function compare(seconds: number): Promise<void> {
  console.log(`${seconds} s of requests per mode (about 5 KB each, ${IN_FLIGHT} alive at a time), Bun ${Bun.version}`);
  for (const mode of MODES) {
    const child = Bun.spawn([process.execPath, import.meta.path, "--child", mode, String(seconds)], {
      env: { ...process.env, BUN_JSC_logGC: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    console.log(`${mode.padEnd(8)} ${out.trim().padStart(9)} requests: ${formatGc(summarizeGcLog(out + err, 2))}`);
  }
}

interface Req {
  id: number;
  payload: number[] | null;
}

function churn(mode: Mode, seconds: number): void {
  const set = new Set<Req>();
  let queued = new Map<number, Req>();
  const inFlight: Req[] = [];
  let n = 0;
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    for (let k = 0; k < 1000; k++) {
      const req: Req = { id: n++, payload: new Array<number>(600).fill(n) };
      if (mode === "set" || mode === "cleared") set.add(req);
      inFlight.push(req);
      if (inFlight.length <= IN_FLIGHT) continue;
      const done = inFlight.shift()!;
      if (mode === "set" || mode === "cleared") set.delete(done);
      if (mode === "cleared") done.payload = null;
      if (mode === "deleted" || mode === "rebuilt") queued.set(done.id, done);
      if (queued.size < BATCH) continue;
      if (mode === "deleted") for (const id of [...queued.keys()]) queued.delete(id);
      else queued = new Map();
    }
  }
  console.log(n);
}
