/**
 * WAL checkpoints off the serving thread. SQLite checkpoints in the connection that commits
 * past wal_autocheckpoint (1000 pages): with the batched chat history that was the serving
 * connection, which then stood still for the copy and its two fsyncs (about 10–15 ms on the
 * development machine, one to two times a second at 7 000 chat requests/s), holding every
 * request in flight. Here a worker thread (store/checkpointWorker.ts) checkpoints on its own
 * connection every CHECKPOINT_INTERVAL_MS, and the serving connection's autocheckpoint is off
 * only while that worker runs: if it cannot start or fails, autocheckpoint is back at once, so
 * the WAL never grows without bound. Durability is unchanged (the same checkpoints, the same
 * synchronous setting); other processes on the file (the CLI) keep their own autocheckpoint.
 */
import type { Database } from "bun:sqlite";
import { spawnEntrypointWorker } from "../core/entrypointWorker";

/** How often the worker checkpoints: the WAL holds at most about this long's writes. */
export const CHECKPOINT_INTERVAL_MS = 500;
/** SQLite's default, restored when the worker is not running. */
const AUTOCHECKPOINT_PAGES = 1000;

export type CheckpointOrder = { kind: "start"; path: string; intervalMs: number } | { kind: "stop" };
export type CheckpointReport = { kind: "ready" } | { kind: "stopped" } | { kind: "failed"; message: string };

/** What this module needs of its worker (tests hand in a stand-in). */
type CheckpointWorker = Worker & { unref(): void };

export interface BackgroundCheckpoints {
  /** A final checkpoint on the worker, then the worker ends; autocheckpoint is back on the serving connection. */
  stop(): Promise<void>;
}

/** The checkpoint worker, an entrypoint of the compiled binary of its own (core/entrypointWorker). */
function spawnCheckpointWorker(): CheckpointWorker {
  return spawnEntrypointWorker("store/checkpointWorker.ts");
}

export function checkpointInBackground(db: Database, onProblem: (message: string) => void, spawn: () => CheckpointWorker = spawnCheckpointWorker): BackgroundCheckpoints {
  let running = false;
  let stopped: (() => void) | null = null;
  const autocheckpoint = (pages: number) => {
    try {
      db.exec(`PRAGMA wal_autocheckpoint = ${pages}`);
    } catch {
      // The database is already closed: nothing left to checkpoint from this connection.
    }
  };
  const fallBack = (message: string) => {
    running = false;
    autocheckpoint(AUTOCHECKPOINT_PAGES);
    onProblem(message);
  };
  let worker: CheckpointWorker;
  try {
    worker = spawn();
  } catch (e) {
    fallBack(`the checkpoint worker did not start: ${e instanceof Error ? e.message : String(e)}`);
    return { stop: async () => {} };
  }
  worker.unref();
  worker.onmessage = (event: MessageEvent<CheckpointReport>) => {
    const report = event.data;
    if (report.kind === "ready") {
      running = true;
      autocheckpoint(0);
    } else if (report.kind === "stopped") {
      stopped?.();
    } else {
      fallBack(`background WAL checkpoint failed: ${report.message}`);
    }
  };
  worker.onerror = (event) => fallBack(`the checkpoint worker failed: ${event.message}`);
  worker.postMessage({ kind: "start", path: db.filename, intervalMs: CHECKPOINT_INTERVAL_MS } satisfies CheckpointOrder);
  return {
    async stop() {
      autocheckpoint(AUTOCHECKPOINT_PAGES);
      if (running) {
        const done = new Promise<void>((resolve) => (stopped = resolve));
        worker.postMessage({ kind: "stop" } satisfies CheckpointOrder);
        await Promise.race([done, Bun.sleep(2_000)]);
      }
      running = false;
      worker.terminate();
    },
  };
}
