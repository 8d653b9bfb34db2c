/**
 * An idle server sleeps: a hobbyist's one binary on a laptop or a small VPS should not wake its
 * event loop a hundred times a second with nothing to do (prom-client's event loop delay
 * sampling did, every 10 ms, until it was given a longer period: http/metrics). Counted as the
 * voluntary context switches of the server process's main thread (each wake-up from its
 * event loop's wait is one), from Linux's /proc, over a few quiet seconds after start.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { ATELIER_FROM_SOURCE, startServerProcess, type ServerProcess } from "../support/process";
import { tempDir } from "../support/tempDirs";

const servers: ServerProcess[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
});

/** The main thread's voluntary context switches so far. */
function wakeUps(pid: number): number {
  const status = readFileSync(`/proc/${pid}/task/${pid}/status`, "utf8");
  return Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)![1]);
}

test.skipIf(!existsSync("/proc/self/task"))("an idle server wakes its event loop at most a few dozen times a second", async () => {
  const server = await startServerProcess(ATELIER_FROM_SOURCE, ["--port", "0", "--data", tempDir("atelier-idle-")]);
  servers.push(server);
  expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  // The start's own work (tasks, sweeps, the first checkpoint) settles first.
  await Bun.sleep(1500);
  const pid = server.proc.pid;
  const before = wakeUps(pid);
  const seconds = 3;
  await Bun.sleep(seconds * 1000);
  const perSecond = (wakeUps(pid) - before) / seconds;
  // With the 10 ms sampling timer: about 100 a second; now about 10 (its 100 ms period), plus
  // whatever else wakes Bun now and then.
  expect(perSecond).toBeLessThan(40);
  // Still serving.
  expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
});
