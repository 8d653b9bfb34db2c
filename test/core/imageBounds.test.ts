/**
 * Every decoder is bounded by what the header allows (issue 9, decompression bombs): PNG image
 * data must inflate to exactly the size its IHDR fixes (interlaced, 16-bit and palette images
 * included) and the inflate stops at the first byte over; JPEG scans are limited; a WebP whose
 * container and bitstream disagree is refused.
 */
import { describe, expect, test } from "bun:test";
import encodeWebp from "@jsquash/webp/encode.js";
import { PNG } from "pngjs";
import { decodeImage, ImageDecodeError } from "../../src/core/image/codec";
import { countJpegScans, MAX_JPEG_SCANS } from "../../src/core/image/jpeg";
import { inflateExactly, pngInflatedSize, readPngLayout, type PngLayout } from "../../src/core/image/png";
import { interlacedZerosBomb, pngWithRaw, pngWithZlib, progressiveScanJpeg, zerosZlib } from "../support/imageBombs";

const MiB = 1024 * 1024;
const VALID: [colorType: number, depths: number[], channels: number][] = [
  [0, [1, 2, 4, 8, 16], 1],
  [2, [8, 16], 3],
  [3, [1, 2, 4, 8], 1],
  [4, [8, 16], 2],
  [6, [8, 16], 4],
];

/** The image data length counted the slow way: every stored row of every (Adam7) pass. */
function countedSize(l: PngLayout, channels: number): number {
  const passes = l.interlaced
    ? [[0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2]]
    : [[0, 0, 1, 1]];
  let total = 0;
  for (const [x0, y0, dx, dy] of passes as [number, number, number, number][]) {
    let columns = 0;
    for (let x = x0; x < l.width; x += dx) columns++;
    if (columns === 0) continue;
    for (let y = y0; y < l.height; y += dy) total += 1 + Math.ceil((columns * channels * l.bitDepth) / 8);
  }
  return total;
}

describe("pngInflatedSize", () => {
  test("matches a row-by-row count for every valid colour type and depth, interlaced or not, sizes 1..19", () => {
    for (const [colorType, depths, channels] of VALID) {
      for (const bitDepth of depths) {
        for (const interlaced of [false, true]) {
          for (let width = 1; width < 20; width++) {
            for (let height = 1; height < 20; height++) {
              const layout = { width, height, bitDepth, colorType, interlaced };
              expect(pngInflatedSize(layout)).toBe(countedSize(layout, channels));
            }
          }
        }
      }
    }
  });

  test("the issue's 64x64 interlaced RGBA allows 16,504 bytes; a 1x1 interlaced image stores only pass 1", () => {
    expect(pngInflatedSize({ width: 64, height: 64, bitDepth: 8, colorType: 6, interlaced: true })).toBe(16_504);
    expect(pngInflatedSize({ width: 1, height: 1, bitDepth: 16, colorType: 6, interlaced: true })).toBe(1 + 8);
  });

  test("colour type and depth combinations the PNG specification forbids are refused", () => {
    for (const [colorType, bitDepth] of [[2, 4], [6, 1], [4, 2], [3, 16], [5, 8], [0, 3]]) {
      expect(() => pngInflatedSize({ width: 4, height: 4, bitDepth: bitDepth!, colorType: colorType!, interlaced: false })).toThrow(ImageDecodeError);
    }
  });

  test("readPngLayout reads IHDR; anything else is null", () => {
    const png = pngWithRaw({ width: 5, height: 3, bitDepth: 16, colorType: 2, interlaced: true }, new Uint8Array(0));
    expect(readPngLayout(png)).toEqual({ width: 5, height: 3, bitDepth: 16, colorType: 2, interlaced: true });
    expect(readPngLayout(png.subarray(0, 20))).toBeNull();
    expect(readPngLayout(new Uint8Array(40))).toBeNull();
  });
});

describe("inflateExactly", () => {
  test("gives back exactly the allowed bytes, and refuses one byte more or one byte less", () => {
    const { deflateSync } = require("node:zlib") as typeof import("node:zlib");
    const data = new Uint8Array(1000).map((_, i) => i * 7);
    expect(Buffer.from(inflateExactly(deflateSync(data), 1000)).equals(Buffer.from(data))).toBe(true);
    expect(() => inflateExactly(deflateSync(data), 999)).toThrow(/more than the 999 bytes/);
    expect(() => inflateExactly(deflateSync(data), 1001)).toThrow(/inflates to 1000 bytes; its header requires exactly 1001/);
    expect(() => inflateExactly(new Uint8Array([1, 2, 3, 4]), 10)).toThrow(ImageDecodeError);
  });

  test("stops at the cap: 1 GiB of zeros costs about the cap, not the gigabyte", () => {
    const stream = zerosZlib(1024 * MiB);
    const before = process.memoryUsage().rss;
    expect(() => inflateExactly(stream, 16_504)).toThrow(ImageDecodeError);
    expect(process.memoryUsage().rss - before).toBeLessThan(50 * MiB);
  });
});

describe("PNG decodes are bounded by the header", () => {
  /** Image data of exactly the allowed size: filter byte 0 and samples 0 everywhere. */
  const exact = (l: PngLayout) => new Uint8Array(pngInflatedSize(l));
  const plte = new Uint8Array([10, 20, 30, 40, 50, 60]);

  const cases: [string, PngLayout, { palette?: Uint8Array }][] = [
    ["RGBA 8-bit", { width: 9, height: 7, bitDepth: 8, colorType: 6, interlaced: false }, {}],
    ["interlaced RGBA 8-bit", { width: 13, height: 11, bitDepth: 8, colorType: 6, interlaced: true }, {}],
    ["interlaced RGB 16-bit", { width: 10, height: 9, bitDepth: 16, colorType: 2, interlaced: true }, {}],
    ["grey+alpha 16-bit", { width: 5, height: 6, bitDepth: 16, colorType: 4, interlaced: false }, {}],
    ["interlaced grey 1-bit", { width: 17, height: 5, bitDepth: 1, colorType: 0, interlaced: true }, {}],
    ["palette 2-bit", { width: 11, height: 4, bitDepth: 2, colorType: 3, interlaced: false }, { palette: plte }],
    ["interlaced palette 4-bit", { width: 9, height: 9, bitDepth: 4, colorType: 3, interlaced: true }, { palette: plte }],
  ];

  for (const [name, layout, extra] of cases) {
    test(`${name}: exactly the allowed data decodes; one byte over or under is refused`, () => {
      const img = decodeImage(pngWithRaw(layout, exact(layout), extra), "image/png");
      expect([img.width, img.height, img.data.length]).toEqual([layout.width, layout.height, layout.width * layout.height * 4]);
      if (layout.colorType === 3) expect(Array.from(img.data.subarray(0, 4))).toEqual([10, 20, 30, 255]);
      const over = new Uint8Array(exact(layout).length + 1);
      expect(() => decodeImage(pngWithRaw(layout, over, extra), "image/png")).toThrow(/more than the \d+ bytes its header allows/);
      const under = exact(layout).subarray(1);
      expect(() => decodeImage(pngWithRaw(layout, under, extra), "image/png")).toThrow(/its header requires exactly/);
    });
  }

  test("the issue's bomb (interlaced 64x64, 1 GiB of zeros in a 1 MB file) is refused at once, without the gigabyte", () => {
    const bomb = interlacedZerosBomb();
    expect(bomb.length).toBeLessThan(1.1 * MiB);
    const before = process.memoryUsage().rss;
    expect(() => decodeImage(bomb, "image/png")).toThrow(/inflates to more than the 16504 bytes its header allows/);
    expect(process.memoryUsage().rss - before).toBeLessThan(50 * MiB);
  });

  test("16-bit, palette and non-interlaced bombs are refused the same way", () => {
    const zeros = zerosZlib(256 * MiB);
    const variants: [PngLayout, { palette?: Uint8Array }][] = [
      [{ width: 64, height: 64, bitDepth: 16, colorType: 6, interlaced: true }, {}],
      [{ width: 64, height: 64, bitDepth: 1, colorType: 3, interlaced: true }, { palette: plte }],
      [{ width: 64, height: 64, bitDepth: 8, colorType: 2, interlaced: false }, {}],
    ];
    const before = process.memoryUsage().rss;
    for (const [layout, extra] of variants) {
      expect(() => decodeImage(pngWithZlib(layout, zeros, extra), "image/png")).toThrow(/more than the \d+ bytes its header allows/);
    }
    expect(process.memoryUsage().rss - before).toBeLessThan(50 * MiB);
  });
});

describe("the PNG decoder gives the pixels pngjs gave", () => {
  /** Deterministic pseudo-random bytes (xorshift32). */
  function random(seed: number) {
    let x = seed || 1;
    return (n: number) => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) % n;
    };
  }

  test("random images of every colour type, depth and interlacing, every row filter, palettes and tRNS", () => {
    const next = random(9);
    let compared = 0;
    for (const [colorType, depths, channels] of VALID) {
      for (const bitDepth of depths) {
        for (const interlaced of [false, true]) {
          for (let round = 0; round < 6; round++) {
            const layout = { width: 1 + next(23), height: 1 + next(19), bitDepth, colorType, interlaced };
            const raw = new Uint8Array(pngInflatedSize(layout)).map(() => next(256));
            // A valid filter byte at the start of every stored row.
            let pos = 0;
            const passes = interlaced ? [[0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2]] : [[0, 0, 1, 1]];
            for (const [x0, y0, dx, dy] of passes as [number, number, number, number][]) {
              const columns = Math.ceil((layout.width - x0) / dx);
              const rows = Math.ceil((layout.height - y0) / dy);
              if (columns <= 0 || rows <= 0) continue;
              for (let y = 0; y < rows; y++) {
                raw[pos] = next(5);
                pos += 1 + Math.ceil((columns * channels * bitDepth) / 8);
              }
            }
            const extra: { palette?: Uint8Array; trns?: Uint8Array } = {};
            if (colorType === 3) {
              // Mostly full palettes; shorter ones have indices past their end, which both must refuse.
              const entries = next(4) ? 1 << bitDepth : 1 + next(1 << bitDepth);
              extra.palette = new Uint8Array(entries * 3).map(() => next(256));
              if (next(2)) extra.trns = new Uint8Array(1 + next(entries)).map(() => next(256));
            } else if ((colorType === 0 || colorType === 2) && next(2)) {
              // A transparent colour that some pixels have: take the first pixel's samples.
              const samples = colorType === 0 ? 1 : 3;
              extra.trns = new Uint8Array(samples * 2);
              if (bitDepth === 16) extra.trns.set(raw.subarray(1, 1 + samples * 2));
              else if (bitDepth === 8) for (let i = 0; i < samples; i++) extra.trns[i * 2 + 1] = raw[1 + i]!;
              else extra.trns[1] = next(1 << bitDepth);
            }
            const png = pngWithRaw(layout, raw, extra);
            let theirs: Uint8Array | Error;
            try {
              theirs = new Uint8Array(PNG.sync.read(Buffer.from(png), { skipRescale: false }).data);
            } catch (e) {
              theirs = e as Error;
            }
            if (theirs instanceof Error) {
              expect(() => decodeImage(png, "image/png")).toThrow(ImageDecodeError);
            } else {
              expect(Buffer.from(decodeImage(png, "image/png").data).equals(Buffer.from(theirs))).toBe(true);
              compared++;
            }
          }
        }
      }
    }
    expect(compared).toBeGreaterThan(150);
  });
});

describe("JPEG scans are limited", () => {
  test(`a progressive JPEG with ${MAX_JPEG_SCANS} scans decodes; one more scan is refused before any decoding`, () => {
    const atLimit = progressiveScanJpeg(64, 48, MAX_JPEG_SCANS - 1); // plus the DC scan
    expect(countJpegScans(atLimit)).toBe(MAX_JPEG_SCANS);
    const img = decodeImage(atLimit, "image/jpeg");
    expect([img.width, img.height]).toEqual([64, 48]);
    const over = progressiveScanJpeg(64, 48, MAX_JPEG_SCANS);
    expect(() => decodeImage(over, "image/jpeg")).toThrow(/more than 100 scans/);
  });

  test("a scan bomb (20,000 scans over 36 megapixels, about 1 MB) is refused without walking its blocks", () => {
    // Decoding it would take minutes (about 5 ms per scan, far past the test's timeout); the
    // marker walk stops at scan 101.
    const bomb = progressiveScanJpeg(6000, 6000, 20_000);
    expect(() => decodeImage(bomb, "image/jpeg")).toThrow(/more than 100 scans/);
  });
});

describe("WebP", () => {
  test("a VP8X container whose canvas disagrees with its bitstream (64x64 claimed over 3000x3000) is refused", async () => {
    const side = 3000;
    const rgba = { data: new Uint8ClampedArray(side * side * 4).fill(128), width: side, height: side, colorSpace: "srgb" as const };
    const webp = new Uint8Array(await encodeWebp(rgba as ImageData, { lossless: 1 }));
    const bitstream = webp.subarray(12); // the VP8L chunk
    const vp8x = new Uint8Array([0x56, 0x50, 0x38, 0x58, 10, 0, 0, 0, 0, 0, 0, 0, 63, 0, 0, 63, 0, 0]);
    const body = new Uint8Array([...new TextEncoder().encode("WEBP"), ...vp8x, ...bitstream]);
    const riff = new Uint8Array(8 + body.length);
    riff.set(new TextEncoder().encode("RIFF"));
    new DataView(riff.buffer).setUint32(4, body.length, true);
    riff.set(body, 8);
    expect(() => decodeImage(riff, "image/webp")).toThrow(ImageDecodeError);
    expect(decodeImage(webp, "image/webp").width).toBe(side);
  });
});
