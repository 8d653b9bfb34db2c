/**
 * The SQLite WAL checkpoint, on its own thread (store/walCheckpoints.ts starts it for a serving
 * process): its own connection to the database file copies the WAL's committed pages back into
 * the database every `intervalMs` (PASSIVE: it never waits for or blocks a writer), and the
 * fsyncs that costs wait here instead of on the thread that answers requests. A separate
 * entrypoint of the compiled binary (see package.json "build").
 */
import { Database } from "bun:sqlite";
import type { CheckpointOrder, CheckpointReport } from "./walCheckpoints";

declare const self: Worker;

let db: Database | null = null;
let timer: ReturnType<typeof setInterval> | null = null;

function report(message: CheckpointReport): void {
  self.postMessage(message);
}

function checkpoint(): void {
  try {
    // A busy answer (another connection checkpointing at that moment) is a row, not an error
    // (SQLite's OP_Checkpoint turns SQLITE_BUSY into the row's busy flag): the next round tries
    // again. What throws is a real failure (a disk error), and checkpoints go back to the
    // serving connection.
    db?.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  } catch (e) {
    report({ kind: "failed", message: e instanceof Error ? e.message : String(e) });
  }
}

self.onmessage = (event: MessageEvent<CheckpointOrder>) => {
  const order = event.data;
  if (order.kind === "start") {
    try {
      db = new Database(order.path, { readwrite: true, create: false });
      db.exec("PRAGMA busy_timeout = 0");
    } catch (e) {
      report({ kind: "failed", message: e instanceof Error ? e.message : String(e) });
      return;
    }
    timer = setInterval(checkpoint, order.intervalMs);
    report({ kind: "ready" });
  } else {
    if (timer) clearInterval(timer);
    checkpoint();
    db?.close();
    db = null;
    report({ kind: "stopped" });
  }
};
