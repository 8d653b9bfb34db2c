/**
 * Modes of what Atelier keeps on disk. The database holds the key that signs image links
 * (server_secrets.image_links), every prompt and every e-mail; a backup is the same file. With
 * the usual umask (022) they came out 0644 in a 0755 directory, readable by every local user,
 * who could then forge a link to any image and read every prompt. So the files Atelier writes
 * are 0600 and the folders it creates 0700, whatever the umask.
 */
import { chmodSync, closeSync, mkdirSync, openSync, statSync } from "node:fs";

export const PRIVATE_FILE = 0o600;
export const PRIVATE_DIR = 0o700;

/** Creates dir (and any missing parent) 0700. A folder that already exists keeps its mode: see looseDirMode. */
export function makePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR });
}

/**
 * Makes an existing file 0600 (one an older Atelier wrote 0644); a missing file is fine. A file
 * that belongs to another user cannot be changed by us (EPERM): it is left as its owner set it,
 * rather than refusing a start that worked before.
 */
export function tightenFile(file: string): void {
  try {
    if ((statSync(file).mode & 0o077) !== 0) chmodSync(file, PRIVATE_FILE);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== "ENOENT" && code !== "EPERM") throw e;
  }
}

/** Creates file empty and 0600 when it is missing, and tightens it when it is there. */
export function ensurePrivateFile(file: string): void {
  closeSync(openSync(file, "a", PRIVATE_FILE));
  tightenFile(file);
}

/**
 * The mode of dir when group or others may enter or list it (e.g. "0755"), else null (also when
 * it does not exist). Such a folder is reported, not changed: it may be one the operator made
 * for more than Atelier (a home directory, a shared mount), and the files in it are 0600
 * anyway, so what it still shows is names, sizes and times.
 */
export function looseDirMode(dir: string): string | null {
  try {
    const mode = statSync(dir).mode & 0o777;
    return (mode & 0o077) === 0 ? null : `0${mode.toString(8)}`;
  } catch {
    return null;
  }
}
