/**
 * Temporary directories for tests (data dirs, config files, a fake upstream's files). Every one
 * is removed when the run ends, by the preload's afterAll (test/support/setup.ts), if its test
 * has not removed it already: a run of the suite used to leave some 8 000 of them behind.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const made: string[] = [];

/** A fresh directory in the system's temp dir, removed at the end of the run. */
export function tempDir(prefix = "atelier-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

/** Removes every directory tempDir made (and the test left). */
export function removeTempDirs(): void {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}
