import { describe, expect, test } from "bun:test";
import type { ArchivedImage } from "../../src/core/imageArchive";
import { downscale, ImageThumbnails, THUMBNAIL_MAX_SIDE } from "../../src/core/imageThumbnails";
import type { Rgba } from "../../src/core/image/codec";

function solid(width: number, height: number, rgba: [number, number, number, number]): Rgba {
  const data = new Uint8Array(width * height * 4);
  for (let i = 0; i < data.length; i += 4) data.set(rgba, i);
  return { width, height, data };
}

const image = (sha: string, width = 1024, height = 512): ArchivedImage => ({
  id: `img_${sha}`, requestId: "req_1", userId: 1, mime: "image/png", bytes: 1, width, height, sha256: sha.padEnd(64, "0"), createdAt: 0, expiresAt: null,
});

describe("downscale", () => {
  test("the longer side becomes the maximum, the aspect ratio stays, colours average", () => {
    const img = solid(1024, 512, [10, 20, 30, 255]);
    const out = downscale(img, THUMBNAIL_MAX_SIDE);
    expect([out.width, out.height]).toEqual([256, 128]);
    expect([...out.data.slice(0, 4)]).toEqual([10, 20, 30, 255]);
    // A 2x1 of black and white averages to grey; transparent pixels do not darken the colour.
    const bw = { width: 2, height: 1, data: new Uint8Array([0, 0, 0, 255, 255, 255, 255, 255]) };
    expect([...downscale(bw, 1).data]).toEqual([128, 128, 128, 255]);
    const half = { width: 2, height: 1, data: new Uint8Array([200, 100, 50, 255, 0, 0, 0, 0]) };
    expect([...downscale(half, 1).data]).toEqual([200, 100, 50, 128]);
  });

  test("never upscales", () => {
    const small = solid(100, 40, [1, 2, 3, 4]);
    expect(downscale(small, 256)).toBe(small);
  });
});

describe("ImageThumbnails", () => {
  test("one decode per content, shared by concurrent requests; small images are served as they are; the cache stays within its bound", async () => {
    let decodes = 0;
    const thumbs = new ImageThumbnails({
      read: async () => new Uint8Array([1, 2, 3]),
      decode: async (_b, _m) => (decodes++, solid(1024, 512, [9, 9, 9, 255])),
      encodePng: (img) => new Uint8Array(img.width * 4), // 1 KiB per thumbnail
      maxCacheBytes: 2048,
    });
    const [a, b] = await Promise.all([thumbs.thumbnailOf(image("a")), thumbs.thumbnailOf(image("a"))]);
    expect(a).toBe(b!);
    expect(decodes).toBe(1);
    expect(a!.mime).toBe("image/png");
    await thumbs.thumbnailOf(image("b"));
    await thumbs.thumbnailOf(image("c"));
    expect(thumbs.size).toEqual({ entries: 2, bytes: 2048 });
    await thumbs.thumbnailOf(image("a")); // evicted: decoded again
    expect(decodes).toBe(4);
    const tiny = await thumbs.thumbnailOf(image("d", 96, 64));
    expect([...tiny!.bytes]).toEqual([1, 2, 3]);
    expect(decodes).toBe(4);
  });

  test("a missing file is null", async () => {
    const thumbs = new ImageThumbnails({ read: async () => null, decode: async () => solid(1, 1, [0, 0, 0, 0]), encodePng: () => new Uint8Array(1), maxCacheBytes: 10 });
    expect(await thumbs.thumbnailOf(image("x"))).toBeNull();
  });
});
