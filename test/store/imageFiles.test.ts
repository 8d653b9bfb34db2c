/**
 * FileImageBlobs.exists: "not there" only when the file is missing; a disk that cannot be read
 * is an error, never "missing" (the sweep deletes rows whose file is missing).
 */
import { afterAll, expect, test } from "bun:test";
import { mkdirSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { FileImageBlobs } from "../../src/store/imageFiles";
import { tempDir } from "../support/tempDirs";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

test("a written image exists, a missing one does not", async () => {
  const dir = tempDir();
  dirs.push(dir);
  const blobs = new FileImageBlobs(join(dir, "images"));
  await blobs.write("ab/cdef.png", new Uint8Array([1, 2, 3]));
  expect(await blobs.exists("ab/cdef.png")).toBe(true);
  expect(await blobs.exists("ab/other.png")).toBe(false);
  expect(await blobs.exists("zz/never.png")).toBe(false);
});

test("a folder that cannot be read (a symlink loop here) is an error, not a missing file", async () => {
  const dir = tempDir();
  dirs.push(dir);
  mkdirSync(join(dir, "images"));
  symlinkSync(join(dir, "images", "ab"), join(dir, "images", "ab"));
  const blobs = new FileImageBlobs(join(dir, "images"));
  await expect(blobs.exists("ab/cdef.png")).rejects.toThrow(/ELOOP|too many/i);
});
