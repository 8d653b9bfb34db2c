/**
 * The lock file a running server keeps in its data directory (data_dir/atelier.lock, holding its
 * pid), so that `atelier restore` can refuse to replace the database under it. A file left by a
 * server that died is stale: its pid no longer runs, and it is ignored (and overwritten).
 */
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PRIVATE_FILE } from "../store/privateFiles";

export const lockPath = (dataDir: string) => join(dataDir, "atelier.lock");

/** Written by `serve` once it listens; removed when it stops. */
export function holdServerLock(dataDir: string): () => void {
  const file = lockPath(dataDir);
  // 0600 like everything else Atelier writes in the data directory (store/privateFiles.ts).
  writeFileSync(file, `${process.pid}\n`, { mode: PRIVATE_FILE });
  return () => {
    try {
      if (readFileSync(file, "utf8").trim() === String(process.pid)) rmSync(file, { force: true });
    } catch {}
  };
}

/** The pid of the server running on dataDir, or undefined when none is. */
export function runningServerPid(dataDir: string): number | undefined {
  let pid: number;
  try {
    pid = Number(readFileSync(lockPath(dataDir), "utf8").trim());
  } catch {
    return undefined;
  }
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return undefined;
  try {
    process.kill(pid, 0);
    return pid;
  } catch (e) {
    // EPERM: the process exists but belongs to another user — still a running server.
    return (e as NodeJS.ErrnoException).code === "EPERM" ? pid : undefined;
  }
}
