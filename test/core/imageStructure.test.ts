/**
 * Uploads are proved decodable without decoding their pixels (issue 15): the structure walk
 * (image/structure) refuses every truncation and every damaged PNG byte, and a PNG's image data
 * is inflated, bounded by its header, in the decode pool (verifyPngData), so bombs and bad
 * rows are still refused before the charge. Valid images of every kind pass.
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { encode as encodeJpeg } from "jpeg-js";
import encodeWebp from "@jsquash/webp/encode.js";
import { encodePng, ImageDecodeError, verifyUploadOffThread } from "../../src/core/image/codec";
import { sharedDecodePool } from "../../src/core/image/decodePool";
import { checkImageStructure } from "../../src/core/image/structure";
import { verifyPngData } from "../../src/core/image/png";
import type { ImageMime } from "../../src/core/engine";
import { interlacedZerosBomb, pngWithRaw, progressiveScanJpeg } from "../support/imageBombs";

function noise(width: number, height: number, seed: number): Uint8Array {
  const out = new Uint8Array(width * height * 4);
  let x = seed || 1;
  for (let i = 0; i < out.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

const png = encodePng({ width: 23, height: 17, data: noise(23, 17, 1) });
const jpeg = new Uint8Array(encodeJpeg({ width: 40, height: 24, data: Buffer.from(noise(40, 24, 2)) }, 85).data);
const webp = new Uint8Array(
  await encodeWebp({ data: new Uint8ClampedArray(noise(20, 12, 3)), width: 20, height: 12, colorSpace: "srgb" } as ImageData, { quality: 80 }),
);
const webpLossless = new Uint8Array(
  await encodeWebp({ data: new Uint8ClampedArray(noise(20, 12, 4)), width: 20, height: 12, colorSpace: "srgb" } as ImageData, { lossless: 1 }),
);
const valid: [string, Uint8Array, ImageMime][] = [
  ["PNG", png, "image/png"],
  ["JPEG", jpeg, "image/jpeg"],
  ["lossy WebP", webp, "image/webp"],
  ["lossless WebP", webpLossless, "image/webp"],
];

const refused = (f: () => unknown) => {
  try {
    f();
    return false;
  } catch (e) {
    if (!(e instanceof ImageDecodeError)) throw e;
    return true;
  }
};

describe("the structure walk", () => {
  test("valid PNG, JPEG and lossy and lossless WebP pass, and verifyUploadOffThread accepts them", async () => {
    for (const [, bytes, mime] of valid) {
      expect(refused(() => checkImageStructure(bytes, mime))).toBe(false);
      await verifyUploadOffThread(bytes, mime);
    }
  });

  for (const [name, bytes, mime] of valid) {
    test(`${name}: every truncation is refused`, () => {
      // JPEG may end in padding after EOI; a WebP after its RIFF end: those tails are not the image.
      for (let cut = 0; cut < bytes.length; cut++) expect(refused(() => checkImageStructure(bytes.subarray(0, cut), mime))).toBe(true);
    });
  }

  test("PNG: any change to any single byte is refused (every byte is under a CRC, a length or the signature)", () => {
    fc.assert(
      fc.property(fc.nat({ max: png.length - 1 }), fc.integer({ min: 1, max: 255 }), (at, delta) => {
        const damaged = png.slice();
        damaged[at] = (damaged[at]! + delta) & 255;
        expect(refused(() => checkImageStructure(damaged, "image/png"))).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  test("JPEG: a scan count over the limit is refused by the walk, before any decoder", () => {
    expect(refused(() => checkImageStructure(progressiveScanJpeg(64, 64, 200), "image/jpeg"))).toBe(true);
  });

  test("WebP: an animated file is refused", () => {
    const animated = webp.slice();
    // Rewrite the VP8 chunk's fourcc as ANMF (same size): the walk refuses animation.
    const at = animated.findIndex((_, i) => String.fromCharCode(...animated.subarray(i, i + 4)) === "VP8 ");
    animated.set([0x41, 0x4e, 0x4d, 0x46], at);
    expect(refused(() => checkImageStructure(animated, "image/webp"))).toBe(true);
  });
});

describe("a PNG's image data, inflated in the decode pool without producing pixels", () => {
  test("the interlaced 1 GiB-of-zeros bomb (valid CRCs) is refused", async () => {
    const bomb = interlacedZerosBomb();
    expect(refused(() => checkImageStructure(bomb, "image/png"))).toBe(false);
    expect(await verifyUploadOffThread(bomb, "image/png").then(() => "accepted", (e) => (e instanceof ImageDecodeError ? "refused" : String(e)))).toBe("refused");
  });

  test("a row with an unknown filter, and data that inflates short, are refused", () => {
    const h = { width: 4, height: 3, colorType: 2 };
    const rows = (filters: number[]) => new Uint8Array(filters.flatMap((f) => [f, ...new Array(12).fill(9)]));
    expect(refused(() => verifyPngData(pngWithRaw(h, rows([0, 4, 1]))))).toBe(false);
    expect(refused(() => verifyPngData(pngWithRaw(h, rows([0, 5, 1]))))).toBe(true);
    expect(refused(() => verifyPngData(pngWithRaw(h, rows([0, 4]))))).toBe(true);
  });

  test("a palette image whose indices can pass its palette is decoded in full: an index past it is refused", () => {
    const h = { width: 2, height: 1, colorType: 3, bitDepth: 8 };
    const palette = new Uint8Array([255, 0, 0, 0, 255, 0]);
    expect(refused(() => verifyPngData(pngWithRaw(h, new Uint8Array([0, 1, 0]), { palette })))).toBe(false);
    expect(refused(() => verifyPngData(pngWithRaw(h, new Uint8Array([0, 1, 2]), { palette })))).toBe(true);
  });

  test("the pool check leaves no reservation behind", async () => {
    await verifyUploadOffThread(png, "image/png");
    expect(sharedDecodePool().reservedBytes).toBe(0);
  });
});
