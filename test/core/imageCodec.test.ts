import { describe, expect, test } from "bun:test";
import { deflateSync } from "node:zlib";
import { encode as encodeJpeg } from "jpeg-js";
import encodeWebp from "@jsquash/webp/encode.js";
import { decodeImage, encodePng, ImageDecodeError, pngHasAlpha, readDimensions, type Rgba } from "../../src/core/image/codec";

/** A test image with distinct, position-dependent colours and a varying alpha. */
function sample(width: number, height: number, opaque = false): Rgba {
  const data = new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 4;
      data[i] = (x * 37) & 255;
      data[i + 1] = (y * 53) & 255;
      data[i + 2] = (x * y * 7) & 255;
      data[i + 3] = opaque ? 255 : (x + y * width) * 11 & 255;
    }
  }
  return { width, height, data };
}

// --- A tiny PNG writer for the variants pngjs cannot produce (palette, low bit depths, Adam7) ---

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 255]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type: string, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + body.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, body.length);
  out.set(new TextEncoder().encode(type), 4);
  out.set(body, 8);
  v.setUint32(8 + body.length, crc32(out.subarray(4, 8 + body.length)));
  return out;
}
function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) (out.set(p, at), (at += p.length));
  return out;
}

interface RawPng {
  width: number;
  height: number;
  colorType: 0 | 2 | 3 | 4 | 6;
  bitDepth: 1 | 2 | 4 | 8 | 16;
  interlace?: boolean;
  palette?: number[][];
  trns?: Uint8Array;
  /** Sample values for pixel (x, y), one per channel, each < 2^bitDepth. */
  samples: (x: number, y: number) => number[];
}

const ADAM7 = [
  [0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2],
] as const;

function rawPng(p: RawPng): Uint8Array {
  const ihdr = new Uint8Array(13);
  const v = new DataView(ihdr.buffer);
  v.setUint32(0, p.width);
  v.setUint32(4, p.height);
  ihdr.set([p.bitDepth, p.colorType, 0, 0, p.interlace ? 1 : 0], 8);
  const rows: number[] = [];
  const passes = p.interlace ? ADAM7 : ([[0, 0, 1, 1]] as const);
  for (const [x0, y0, dx, dy] of passes) {
    const xs: number[] = [];
    for (let x = x0; x < p.width; x += dx) xs.push(x);
    if (xs.length === 0) continue;
    for (let y = y0; y < p.height; y += dy) {
      rows.push(0); // filter type None
      let acc = 0;
      let bits = 0;
      for (const x of xs) {
        for (const s of p.samples(x, y)) {
          if (p.bitDepth === 16) rows.push(s >> 8, s & 255);
          else if (p.bitDepth === 8) rows.push(s);
          else {
            acc = (acc << p.bitDepth) | s;
            bits += p.bitDepth;
            if (bits === 8) (rows.push(acc), (acc = 0), (bits = 0));
          }
        }
      }
      if (bits > 0) rows.push(acc << (8 - bits));
    }
  }
  return concat([
    new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr),
    ...(p.palette ? [chunk("PLTE", new Uint8Array(p.palette.flat()))] : []),
    ...(p.trns ? [chunk("tRNS", p.trns)] : []),
    chunk("IDAT", new Uint8Array(deflateSync(new Uint8Array(rows)))),
    chunk("IEND", new Uint8Array(0)),
  ]);
}

const pixel = (img: Rgba, x: number, y: number) => Array.from(img.data.subarray((y * img.width + x) * 4, (y * img.width + x) * 4 + 4));

describe("PNG", () => {
  test("encodePng then decodeImage gives back exactly the same RGBA", () => {
    const img = sample(37, 23);
    const png = encodePng(img);
    const back = decodeImage(png, "image/png");
    expect(back.width).toBe(37);
    expect(back.height).toBe(23);
    expect(Buffer.from(back.data).equals(Buffer.from(img.data))).toBe(true);
  });

  test("encodePng refuses a buffer whose length does not match its dimensions", () => {
    expect(() => encodePng({ width: 4, height: 4, data: new Uint8Array(10) })).toThrow(RangeError);
  });

  test("decodes grey 1-bit, grey+alpha 8-bit, RGB 16-bit, palette with tRNS and interlaced RGBA to 8-bit RGBA", () => {
    const grey1 = decodeImage(rawPng({ width: 10, height: 3, colorType: 0, bitDepth: 1, samples: (x) => [x % 2] }), "image/png");
    expect(pixel(grey1, 0, 1)).toEqual([0, 0, 0, 255]);
    expect(pixel(grey1, 9, 2)).toEqual([255, 255, 255, 255]);

    const greyAlpha = decodeImage(rawPng({ width: 4, height: 4, colorType: 4, bitDepth: 8, samples: (x, y) => [x * 60, y * 80] }), "image/png");
    expect(pixel(greyAlpha, 3, 2)).toEqual([180, 180, 180, 160]);

    const rgb16 = decodeImage(
      rawPng({ width: 3, height: 2, colorType: 2, bitDepth: 16, samples: (x, y) => [65535, [0, 32768, 65535][x]!, y * 65535] }),
      "image/png",
    );
    expect(pixel(rgb16, 0, 0)).toEqual([255, 0, 0, 255]);
    expect(pixel(rgb16, 1, 1)[1]).toBeOneOf([127, 128]);
    expect(pixel(rgb16, 2, 1)).toEqual([255, 255, 255, 255]);

    const palette = rawPng({
      width: 5,
      height: 5,
      colorType: 3,
      bitDepth: 4,
      palette: [[255, 0, 0], [0, 255, 0], [0, 0, 255]],
      trns: new Uint8Array([0, 128]), // entry 2 is opaque by omission
      samples: (x, y) => [(x + y) % 3],
    });
    const pal = decodeImage(palette, "image/png");
    expect(pixel(pal, 0, 0)).toEqual([255, 0, 0, 0]);
    expect(pixel(pal, 1, 0)).toEqual([0, 255, 0, 128]);
    expect(pixel(pal, 2, 0)).toEqual([0, 0, 255, 255]);

    const src = sample(13, 11);
    const interlaced = rawPng({
      width: 13,
      height: 11,
      colorType: 6,
      bitDepth: 8,
      interlace: true,
      samples: (x, y) => pixel(src, x, y),
    });
    const inter = decodeImage(interlaced, "image/png");
    expect(Buffer.from(inter.data).equals(Buffer.from(src.data))).toBe(true);
  });

  test("pngHasAlpha: true for RGBA, grey+alpha and palette+tRNS; false for RGB, grey and non-PNG bytes", () => {
    expect(pngHasAlpha(encodePng(sample(4, 4)))).toBe(true);
    expect(pngHasAlpha(rawPng({ width: 2, height: 2, colorType: 4, bitDepth: 8, samples: () => [1, 2] }))).toBe(true);
    expect(
      pngHasAlpha(rawPng({ width: 2, height: 2, colorType: 3, bitDepth: 8, palette: [[1, 2, 3]], trns: new Uint8Array([0]), samples: () => [0] })),
    ).toBe(true);
    expect(pngHasAlpha(rawPng({ width: 2, height: 2, colorType: 2, bitDepth: 8, samples: () => [1, 2, 3] }))).toBe(false);
    expect(pngHasAlpha(rawPng({ width: 2, height: 2, colorType: 0, bitDepth: 8, samples: () => [9] }))).toBe(false);
    expect(pngHasAlpha(jpegBytes(sample(8, 8, true)))).toBe(false);
    expect(pngHasAlpha(new Uint8Array(3))).toBe(false);
  });
});

function jpegBytes(img: Rgba, quality = 95): Uint8Array {
  const out = encodeJpeg({ width: img.width, height: img.height, data: img.data }, quality);
  return new Uint8Array(out.data);
}

/** Mean absolute difference per channel over RGB. */
function meanRgbError(a: Rgba, b: Rgba): number {
  let sum = 0;
  for (let i = 0; i < a.data.length; i += 4) {
    for (let c = 0; c < 3; c++) sum += Math.abs(a.data[i + c]! - b.data[i + c]!);
  }
  return sum / ((a.data.length / 4) * 3);
}

/** A smooth picture: lossy codecs keep it close, so a wrong decode shows as a large error. */
function gradient(width: number, height: number): Rgba {
  const data = new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 4;
      data.set([Math.round((x / width) * 255), Math.round((y / height) * 255), 96, 255], i);
    }
  }
  return { width, height, data };
}

describe("JPEG", () => {
  test("decodes a real JPEG to RGBA of its size, close to what was encoded, alpha 255", () => {
    const src = gradient(48, 32);
    const img = decodeImage(jpegBytes(src), "image/jpeg");
    expect([img.width, img.height]).toEqual([48, 32]);
    expect(meanRgbError(img, src)).toBeLessThan(4);
    expect(img.data.filter((_, i) => i % 4 === 3).every((a) => a === 255)).toBe(true);
  });
});

async function webpBytes(img: Rgba, options: { lossless?: number; quality?: number }): Promise<Uint8Array> {
  const imageData = { data: new Uint8ClampedArray(img.data), width: img.width, height: img.height, colorSpace: "srgb" as const };
  return new Uint8Array(await encodeWebp(imageData as ImageData, options));
}

describe("WebP", () => {
  test("decodes lossless WebP exactly, alpha included", async () => {
    const src = sample(21, 9);
    const bytes = await webpBytes(src, { lossless: 1 });
    expect(readDimensions(bytes, "image/webp")).toEqual({ width: 21, height: 9 });
    const img = decodeImage(bytes, "image/webp");
    expect([img.width, img.height]).toEqual([21, 9]);
    expect(Buffer.from(img.data).equals(Buffer.from(src.data))).toBe(true);
  });

  test("decodes lossy WebP close to what was encoded", async () => {
    const src = gradient(40, 24);
    const bytes = await webpBytes(src, { quality: 90 });
    expect(readDimensions(bytes, "image/webp")).toEqual({ width: 40, height: 24 });
    const img = decodeImage(bytes, "image/webp");
    expect([img.width, img.height]).toEqual([40, 24]);
    expect(meanRgbError(img, src)).toBeLessThan(4);
  });

  test("a tiny embedded lossy WebP (made by libwebp) decodes, so decoding does not depend on the encoder", () => {
    const bytes = Buffer.from(
      "UklGRmQAAABXRUJQVlA4IFgAAABwAgCdASoQAAgAAMASJbACdHMBLgGj/gegCuKAAP7/TzZnUv4vz8U3+su/4h74DuZ+/+Obp+Hvy3bX7fj/EKv/6c/9XPgezf/9Mb9+B7N//6k/+OlraAAA",
      "base64",
    );
    const img = decodeImage(bytes, "image/webp");
    expect([img.width, img.height]).toEqual([16, 8]);
    // The source had blue 128 everywhere; red grows to the right.
    expect(Math.abs(pixel(img, 8, 4)[2]! - 128)).toBeLessThan(16);
    expect(pixel(img, 15, 4)[0]!).toBeGreaterThan(pixel(img, 0, 4)[0]! + 150);
  });
});

describe("bad input", () => {
  test("corrupt or truncated bytes throw ImageDecodeError for every format, and the decoders keep working after", async () => {
    const png = encodePng(sample(16, 16));
    const jpeg = jpegBytes(sample(16, 16, true));
    const webp = await webpBytes(sample(16, 16), { lossless: 1 });
    expect(() => decodeImage(png.subarray(0, png.length - 30), "image/png")).toThrow(ImageDecodeError);
    expect(() => decodeImage(jpeg.subarray(0, 40), "image/jpeg")).toThrow(ImageDecodeError);
    expect(() => decodeImage(webp.subarray(0, 40), "image/webp")).toThrow(ImageDecodeError);
    expect(() => decodeImage(new Uint8Array(64), "image/webp")).toThrow(ImageDecodeError);
    expect(() => decodeImage(png, "image/jpeg")).toThrow(ImageDecodeError);
    expect(decodeImage(webp, "image/webp").width).toBe(16);
  });

  test("a decoded WebP owns its pixels: decoding another one does not change it", async () => {
    const first = await webpBytes(sample(12, 12), { lossless: 1 });
    const second = await webpBytes(gradient(12, 12), { lossless: 1 });
    const a = decodeImage(first, "image/webp");
    const snapshot = Buffer.from(a.data);
    decodeImage(second, "image/webp");
    expect(Buffer.from(a.data).equals(snapshot)).toBe(true);
    expect(Buffer.from(a.data).equals(Buffer.from(sample(12, 12).data))).toBe(true);
  });

  test("a header claiming more than MAX_DECODED_PIXELS is refused before decoding", () => {
    const bomb = encodePng(sample(4, 4));
    new DataView(bomb.buffer, bomb.byteOffset).setUint32(16, 100_000);
    new DataView(bomb.buffer, bomb.byteOffset).setUint32(20, 100_000);
    expect(() => decodeImage(bomb, "image/png")).toThrow(/megapixels/);
  });

  test("readDimensions reads PNG and JPEG headers", () => {
    expect(readDimensions(encodePng(sample(31, 7)), "image/png")).toEqual({ width: 31, height: 7 });
    expect(readDimensions(jpegBytes(sample(19, 45, true)), "image/jpeg")).toEqual({ width: 19, height: 45 });
    expect(readDimensions(new Uint8Array(10), "image/jpeg")).toBeNull();
  });
});
