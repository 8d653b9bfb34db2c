/**
 * The image archive on a real temporary folder and the real SQLite store (in memory): atomic
 * content-addressed writes, rows and files that never disagree after a sweep (repair both
 * ways, a crash mid-sweep), max_bytes eviction oldest first, retention with a fake clock.
 */
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ImageArchive, ImageSweeper, blobKey, parseBlobKey, type ArchivedImage, type ArchiveSettings, type ImageBlobStore } from "../../src/core/imageArchive";
import { sha256Hex } from "../../src/core/digest";
import { ImageLinks } from "../../src/core/imageLinks";
import { createStore, type Store } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { FileImageBlobs } from "../../src/store/imageFiles";
import { makePng } from "../support/images";
import { tempDir } from "../support/tempDirs";

const DAY = 86_400_000;
let dir: string;
let store: Store;
let now: number;
const clock = () => now;
const warnings: unknown[] = [];
const logger = { warn: (msg: string, fields?: Record<string, unknown>) => void warnings.push({ msg, fields }) };

function archive(settings: Partial<ArchiveSettings> = {}, blobs: ImageBlobStore = new FileImageBlobs(dir)) {
  return new ImageArchive({ records: store.images, blobs, clock, logger, settings: { retentionDays: 30, maxBytes: 0, orphanGraceMs: 0, ...settings } });
}

function png(seed: number): Uint8Array {
  return makePng(8, 8, () => [seed & 255, (seed * 7) & 255, (seed * 13) & 255, 255]);
}

const image = (bytes: Uint8Array, requestId = "req_1") => ({ requestId, userId: 1, bytes, mime: "image/png" as const, width: 8, height: 8 });

/** Every file under the folder, relative, with "/" separators. */
function files(): string[] {
  return (readdirSync(dir, { recursive: true }) as string[]).filter((f) => f.endsWith(".png") || f.includes(".tmp-")).map((f) => f.split("\\").join("/")).sort();
}

beforeEach(() => {
  dir = tempDir("atelier-images-");
  store = createStore(openDatabase(":memory:"), latestVersion());
  now = Date.now();
  warnings.length = 0;
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("put", () => {
  test("writes the bytes under their sha256, sharded, and a row with the image's facts", async () => {
    const bytes = png(1);
    const row = await archive().put(image(bytes));
    const sha = sha256Hex(bytes);
    expect(row).toMatchObject({ requestId: "req_1", userId: 1, mime: "image/png", bytes: bytes.byteLength, width: 8, height: 8, sha256: sha, createdAt: now, expiresAt: now + 30 * DAY });
    expect(row.id).toMatch(/^img_/);
    expect(files()).toEqual([`${sha.slice(0, 2)}/${sha.slice(2, 4)}/${sha}.png`]);
    expect(new Uint8Array(readFileSync(join(dir, blobKey(sha, "image/png")))) as Uint8Array).toEqual(bytes);
    expect(await store.images.get(row.id)).toEqual(row);
    const opened = await archive().open(row.id);
    expect(opened?.bytes).toEqual(bytes);
  });

  test("the same bytes twice share one file; each request has its own row", async () => {
    const a = archive();
    const first = await a.put(image(png(2), "req_a"));
    const second = await a.put(image(png(2), "req_b"));
    expect(first.id).not.toBe(second.id);
    expect(files()).toHaveLength(1);
  });

  test("no temporary file is left behind, and a failed write leaves nothing under the key", async () => {
    await archive().put(image(png(3)));
    expect(files().filter((f) => f.includes(".tmp-"))).toEqual([]);
    // A folder where the file should go: the rename fails, the temp file is gone, no row.
    const bytes = png(4);
    const sha = sha256Hex(bytes);
    mkdirSync(join(dir, blobKey(sha, "image/png")), { recursive: true });
    mkdirSync(join(dir, blobKey(sha, "image/png"), "x"));
    const blobs = new FileImageBlobs(dir);
    blobs.exists = async () => false;
    await expect(archive({}, blobs).put(image(bytes))).rejects.toThrow();
    expect(files().filter((f) => f.includes(".tmp-"))).toEqual([]);
    expect(await store.images.referenced(sha)).toBe(false);
  });

  test("retention_days 0 keeps an image without an expiry", async () => {
    const row = await archive({ retentionDays: 0 }).put(image(png(5)));
    expect(row.expiresAt).toBeNull();
  });

  test("keys round-trip; other names are not keys", () => {
    const sha = sha256Hex("x");
    expect(parseBlobKey(blobKey(sha, "image/webp"))).toEqual({ sha256: sha, mime: "image/webp" });
    expect(parseBlobKey(`00/00/${sha}.png`)).toBeNull();
    expect(parseBlobKey("notes.txt")).toBeNull();
  });
});

describe("retention and max_bytes", () => {
  test("an expired image is gone at once and the sweep deletes its row and file together", async () => {
    const a = archive({ retentionDays: 1 });
    const old = await a.put(image(png(6)));
    now += DAY / 2;
    const fresh = await a.put(image(png(7)));
    now += DAY / 2; // old expires exactly now
    expect(await a.open(old.id)).toBeNull();
    expect(await a.open(fresh.id)).not.toBeNull();
    expect(await a.sweep()).toEqual({ expired: 1, orphanFiles: 0, orphanRows: 0 });
    expect(await store.images.get(old.id)).toBeNull();
    expect(files()).toEqual([blobKey(fresh.sha256, "image/png")]);
  });

  test("a file shared with a live row stays when another row of it expires", async () => {
    const short = archive({ retentionDays: 1 });
    const expiring = await short.put(image(png(8), "req_a"));
    const kept = await archive({ retentionDays: 0 }).put(image(png(8), "req_b"));
    now += 2 * DAY;
    await short.sweep();
    expect(await store.images.get(expiring.id)).toBeNull();
    expect((await short.open(kept.id))?.bytes).toEqual(png(8));
  });

  test("past max_bytes the oldest expire first", async () => {
    const size = png(10).byteLength;
    const a = archive({ retentionDays: 0, maxBytes: size * 2 });
    const rows: ArchivedImage[] = [];
    for (const seed of [10, 11, 12]) {
      rows.push(await a.put(image(png(seed))));
      now += 1000;
    }
    expect(rows.map((r) => r.bytes)).toEqual([size, size, size]);
    expect(await a.open(rows[0]!.id)).toBeNull();
    expect(await a.open(rows[1]!.id)).not.toBeNull();
    expect(await a.open(rows[2]!.id)).not.toBeNull();
    expect((await a.sweep()).expired).toBe(1);
    expect(files()).toEqual([blobKey(rows[1]!.sha256, "image/png"), blobKey(rows[2]!.sha256, "image/png")].sort());
  });
});

describe("repair", () => {
  test("a file without a row (a crash between the write and the row) is deleted after the grace", async () => {
    const bytes = png(20);
    const sha = sha256Hex(bytes);
    await new FileImageBlobs(dir).write(blobKey(sha, "image/png"), bytes);
    const graceful = archive({ orphanGraceMs: 3_600_000 });
    now = Date.now();
    expect((await graceful.sweep()).orphanFiles).toBe(0); // too young: a put may be between its write and its row
    now = Date.now() + 2 * 3_600_000;
    expect((await graceful.sweep()).orphanFiles).toBe(1);
    expect(files()).toEqual([]);
  });

  test("a row without its file is deleted", async () => {
    const a = archive();
    const row = await a.put(image(png(21)));
    rmSync(join(dir, blobKey(row.sha256, "image/png")));
    expect(await a.open(row.id)).toBeNull();
    expect(await a.sweep()).toEqual({ expired: 0, orphanFiles: 0, orphanRows: 1 });
    expect(await store.images.get(row.id)).toBeNull();
    expect(warnings).toHaveLength(1);
  });

  test("a crash mid-sweep (rows deleted, a file delete fails) is repaired by the next sweep", async () => {
    const a = archive({ retentionDays: 1 });
    const rows = [await a.put(image(png(22))), await a.put(image(png(23)))];
    now += 2 * DAY;
    const failing = new FileImageBlobs(dir);
    let removes = 0;
    failing.remove = async (key) => {
      if (++removes === 2) throw new Error("crash");
      return FileImageBlobs.prototype.remove.call(failing, key);
    };
    await expect(archive({ retentionDays: 1 }, failing).sweep()).rejects.toThrow("crash");
    expect(await Promise.all(rows.map((r) => store.images.get(r.id)))).toEqual([null, null]);
    expect(files()).toHaveLength(1); // a file without a row
    expect(await archive({ retentionDays: 1 }).sweep()).toMatchObject({ orphanFiles: 1 });
    expect(files()).toEqual([]);
  });

  test("stale temporary files from a crashed write are removed; fresh ones are left", async () => {
    mkdirSync(join(dir, "ab", "cd"), { recursive: true });
    const stale = join(dir, "ab", "cd", ".tmp-stale");
    const fresh = join(dir, "ab", "cd", ".tmp-fresh");
    writeFileSync(stale, "half");
    writeFileSync(fresh, "half");
    const old = new Date(Date.now() - 2 * 3_600_000);
    utimesSync(stale, old, old);
    await archive().sweep();
    expect(existsSync(stale)).toBe(false);
    expect(existsSync(fresh)).toBe(true);
  });

  test("a put and a sweep of the same bytes do not race: the new row keeps its file", async () => {
    const a = archive({ retentionDays: 1 });
    await a.put(image(png(24), "req_a"));
    now += 2 * DAY;
    const [, row] = await Promise.all([a.sweep(), a.put(image(png(24), "req_b"))]);
    await a.sweep();
    expect((await a.open(row.id))?.bytes).toEqual(png(24));
  });
});

describe("links", () => {
  test("a link works until it expires and refuses any change", async () => {
    const links = new ImageLinks(async () => new Uint8Array(32).fill(7), 3_600_000, clock);
    const { path } = await links.pathFor({ id: "img_abc", mime: "image/png" });
    const url = new URL(path, "http://x");
    const file = url.pathname.split("/").pop()!;
    const expires = url.searchParams.get("expires");
    const signature = url.searchParams.get("signature");
    expect(await links.check(file, expires, signature)).toEqual({ ok: true, id: "img_abc" });
    expect(await links.check("img_abd.png", expires, signature)).toEqual({ ok: false, reason: "bad_signature" });
    expect(await links.check("img_abc.jpg", expires, signature)).toEqual({ ok: false, reason: "bad_signature" });
    expect(await links.check(file, String(Number(expires) + 1), signature)).toEqual({ ok: false, reason: "bad_signature" });
    expect(await links.check(file, expires, signature!.slice(0, -1) + (signature!.endsWith("A") ? "B" : "A"))).toEqual({ ok: false, reason: "bad_signature" });
    expect(await links.check(file, null, signature)).toEqual({ ok: false, reason: "malformed" });
    now += 3_600_000;
    expect(await links.check(file, expires, signature)).toEqual({ ok: false, reason: "expired" });
  });
});

describe("the sweeper", () => {
  test("an interval past the timers' reach (2^31 - 1 ms) sweeps once at start, not in a loop", async () => {
    let sweeps = 0;
    const sweep = async () => (sweeps++, { expired: 0, orphanFiles: 0, orphanRows: 0 });
    const sweeper = new ImageSweeper({ sweep }, 3_000_000_000, { error: () => {} });
    sweeper.start();
    await Bun.sleep(60);
    await sweeper.stop();
    expect(sweeps).toBe(1);
  });
});
