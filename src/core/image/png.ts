/**
 * PNG: every colour type, bit depth 1–16 and Adam7 interlacing decode to 8-bit RGBA; we encode
 * 8-bit RGBA (colour type 6) only, through pngjs.
 *
 * The decoder is ours, and bounded by the header at every step. The rule: the image data must
 * inflate to exactly the size IHDR fixes (pngInflatedSize), and the inflate stops at the first
 * byte over it. Then it is unfiltered in place and expanded once into the RGBA output, so a
 * decode holds the input, the inflated data and the RGBA, nothing more. (pngjs's sync reader
 * inflated interlaced images with no limit at all, so a 1 MB upload claiming 64x64 could grow
 * to gigabytes; and its row copies, 16-bit bitmap and per-pixel arrays took several times the
 * RGBA: about 4 GB for a 40-megapixel 16-bit PNG.)
 */
import { crc32, inflateSync } from "node:zlib";
import { PNG } from "pngjs";
import { releaseBytes } from "./release";
import { ImageDecodeError, type Rgba } from "./rgba";

const SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** Channels per colour type, and the bit depths the PNG specification allows for each. */
const COLOR_TYPES: Record<number, { channels: number; depths: number[] }> = {
  0: { channels: 1, depths: [1, 2, 4, 8, 16] }, // grey
  2: { channels: 3, depths: [8, 16] }, // RGB
  3: { channels: 1, depths: [1, 2, 4, 8] }, // palette index
  4: { channels: 2, depths: [8, 16] }, // grey + alpha
  6: { channels: 4, depths: [8, 16] }, // RGBA
};

/** Adam7 passes as [x0, y0, dx, dy]. */
const ADAM7 = [
  [0, 0, 8, 8],
  [4, 0, 8, 8],
  [0, 4, 4, 8],
  [2, 0, 4, 4],
  [0, 2, 2, 4],
  [1, 0, 2, 2],
  [0, 1, 1, 2],
] as const;

export interface PngLayout {
  width: number;
  height: number;
  bitDepth: number;
  colorType: number;
  interlaced: boolean;
}

/** The IHDR fields that fix the image data's size, or null when IHDR is not where it must be. */
export function readPngLayout(bytes: Uint8Array): PngLayout | null {
  if (bytes.length < 29 || SIGNATURE.some((b, i) => bytes[i] !== b)) return null;
  if (String.fromCharCode(bytes[12]!, bytes[13]!, bytes[14]!, bytes[15]!) !== "IHDR") return null;
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { width: v.getUint32(16), height: v.getUint32(20), bitDepth: bytes[24]!, colorType: bytes[25]!, interlaced: bytes[28] === 1 };
}

/**
 * The exact number of bytes a PNG's image data inflates to: per (sub)image row, one filter
 * byte plus the row's packed samples. Adam7 stores seven reduced images; a pass with no
 * columns or no rows stores nothing, not even filter bytes.
 */
export function pngInflatedSize(layout: PngLayout): number {
  const spec = COLOR_TYPES[layout.colorType];
  if (!spec || !spec.depths.includes(layout.bitDepth)) {
    throw new ImageDecodeError(`PNG colour type ${layout.colorType} with bit depth ${layout.bitDepth} is not a valid combination`);
  }
  const bitsPerPixel = spec.channels * layout.bitDepth;
  const rowsOf = (width: number, height: number) => (width > 0 && height > 0 ? height * (1 + Math.ceil((width * bitsPerPixel) / 8)) : 0);
  if (!layout.interlaced) return rowsOf(layout.width, layout.height);
  let total = 0;
  for (const [x0, y0, dx, dy] of ADAM7) {
    total += rowsOf(Math.ceil((layout.width - x0) / dx), Math.ceil((layout.height - y0) / dy));
  }
  return total;
}

/**
 * Inflates a zlib stream that must produce exactly `size` bytes. zlib's maxOutputLength makes
 * the inflate itself stop once it would pass the cap, so a bomb costs about `size` bytes and a
 * millisecond, never the memory its stream could grow to.
 */
export function inflateExactly(compressed: Uint8Array, size: number): Buffer {
  let out: Buffer;
  try {
    out = inflateSync(compressed, { maxOutputLength: Math.max(size, 1), chunkSize: Math.max(size, 64) });
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "ERR_BUFFER_TOO_LARGE" || err instanceof RangeError) {
      throw new ImageDecodeError(`PNG image data inflates to more than the ${size} bytes its header allows`);
    }
    throw new ImageDecodeError(`PNG image data does not inflate: ${err.message}`);
  }
  if (out.length !== size) {
    throw new ImageDecodeError(`PNG image data inflates to ${out.length} bytes; its header requires exactly ${size}`);
  }
  return out;
}

export function decodePng(bytes: Uint8Array): Rgba {
  const png = readPngChunks(bytes);
  const data = inflateImageData(png);
  try {
    unfilterInPlace(data, png.layout);
    return { width: png.layout.width, height: png.layout.height, data: toRgba(data, png) };
  } finally {
    releaseBytes(data);
  }
}

/**
 * Proves a PNG decodes without producing its pixels: the chunk walk (every CRC), the image data
 * inflating to exactly the size its header fixes, and a known filter on every row. Only a
 * palette image whose palette is shorter than its indices can reach needs the pixels (an index
 * past the palette is refused), and only it is decoded in full.
 */
export function verifyPngData(bytes: Uint8Array): void {
  const png = readPngChunks(bytes);
  if (png.palette && png.palette.length / 4 < 1 << png.layout.bitDepth) {
    decodePng(bytes);
    return;
  }
  const data = inflateImageData(png);
  const bitsPerPixel = COLOR_TYPES[png.layout.colorType]!.channels * png.layout.bitDepth;
  let pos = 0;
  try {
    for (const [, , , , columns, rows] of subimages(png.layout)) {
      const rowBytes = Math.ceil((columns * bitsPerPixel) / 8);
      for (let y = 0; y < rows; y++, pos += 1 + rowBytes) {
        if (data[pos]! > 4) throw new ImageDecodeError(`not a decodable PNG: unknown row filter ${data[pos]}`);
      }
    }
  } finally {
    releaseBytes(data);
  }
}

/**
 * The image data of every IDAT, inflated to exactly the size the header fixes. The joined copy
 * of several IDATs (one alone is a view into the input) and, by the callers, the inflated data
 * are released as soon as they are done with: they are as large as the upload and its pixels.
 */
function inflateImageData(png: PngChunks): Buffer {
  if (png.idat.length === 1) return inflateExactly(png.idat[0]!, pngInflatedSize(png.layout));
  const joined = Buffer.concat(png.idat);
  try {
    return inflateExactly(joined, pngInflatedSize(png.layout));
  } finally {
    releaseBytes(joined);
  }
}

export interface PngChunks {
  layout: PngLayout;
  /** PLTE as RGBA entries (alpha from tRNS, 255 without). */
  palette?: Uint8Array;
  /** tRNS of a grey or RGB image: the sample values (at the image's depth) that are transparent. */
  transparent?: number[];
  /** Every IDAT's data, in order (views into the input). */
  idat: Uint8Array[];
}

/**
 * Walks the chunks: IHDR first, every CRC checked, PLTE before IDAT for palette images, an
 * unknown critical chunk refused (its meaning could change the pixels), ancillary chunks
 * skipped, nothing after IEND. Gamma and colour profiles are ignored, as by most decoders.
 */
export function readPngChunks(bytes: Uint8Array): PngChunks {
  const fail = (why: string) => new ImageDecodeError(`not a decodable PNG: ${why}`);
  if (bytes.length < 8 || SIGNATURE.some((b, i) => bytes[i] !== b)) throw fail("no PNG signature");
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let layout: PngLayout | undefined;
  let palette: Uint8Array | undefined;
  let transparent: number[] | undefined;
  const idat: Uint8Array[] = [];
  let at = 8;
  for (;;) {
    if (at + 12 > bytes.length) throw fail("truncated (no IEND chunk)");
    const length = v.getUint32(at);
    const type = String.fromCharCode(bytes[at + 4]!, bytes[at + 5]!, bytes[at + 6]!, bytes[at + 7]!);
    // Bit 5 of the type's first letter: lowercase = ancillary, safe to ignore when unknown.
    const ancillary = (bytes[at + 4]! & 0x20) !== 0;
    const end = at + 8 + length;
    if (length > 0x7fffffff || end + 4 > bytes.length) throw fail(`truncated ${type} chunk`);
    if (crc32(bytes.subarray(at + 4, end)) !== v.getUint32(end)) throw fail(`CRC mismatch in the ${type} chunk`);
    const body = bytes.subarray(at + 8, end);
    at = end + 4;
    if (!layout && type !== "IHDR") throw fail("the first chunk is not IHDR");
    switch (type) {
      case "IHDR": {
        if (layout) throw fail("a second IHDR chunk");
        if (length !== 13) throw fail("IHDR is not 13 bytes");
        layout = readPngLayout(bytes)!;
        if (layout.width === 0 || layout.height === 0) throw fail("zero width or height");
        if (body[10] !== 0 || body[11] !== 0 || body[12]! > 1) throw fail("unknown compression, filter or interlace method");
        pngInflatedSize(layout); // refuses colour type and depth combinations the format forbids
        break;
      }
      case "PLTE": {
        const entries = Math.floor(length / 3);
        if (entries === 0 || entries > 256) throw fail(`a palette of ${entries} entries`);
        palette = new Uint8Array(entries * 4).fill(255);
        for (let i = 0; i < entries; i++) palette.set(body.subarray(i * 3, i * 3 + 3), i * 4);
        break;
      }
      case "tRNS": {
        if (layout!.colorType === 3) {
          if (!palette) throw fail("tRNS before PLTE");
          if (length > palette.length / 4) throw fail("more transparency entries than palette entries");
          for (let i = 0; i < length; i++) palette[i * 4 + 3] = body[i]!;
        } else if (layout!.colorType === 0 || layout!.colorType === 2) {
          const samples = layout!.colorType === 0 ? 1 : 3;
          if (length < samples * 2) throw fail("tRNS is too short");
          transparent = Array.from({ length: samples }, (_, i) => (body[i * 2]! << 8) | body[i * 2 + 1]!);
        }
        break;
      }
      case "IDAT":
        if (layout!.colorType === 3 && !palette) throw fail("a palette image without PLTE before its data");
        idat.push(body);
        break;
      case "IEND":
        if (at !== bytes.length) throw fail("data after IEND");
        if (idat.length === 0) throw fail("no IDAT chunk");
        return { layout: layout!, palette, transparent, idat };
      default:
        if (!ancillary) throw fail(`unknown critical chunk ${type}`);
    }
  }
}

/** The bytes per complete pixel, at least one: what the Sub, Average and Paeth filters step back. */
function filterStep(layout: PngLayout): number {
  return Math.max(1, (COLOR_TYPES[layout.colorType]!.channels * layout.bitDepth) >> 3);
}

/** Each stored (sub)image as [x0, y0, dx, dy, columns, rows]; empty Adam7 passes left out. */
function subimages(layout: PngLayout): [number, number, number, number, number, number][] {
  const passes = layout.interlaced ? ADAM7 : ([[0, 0, 1, 1]] as const);
  const out: [number, number, number, number, number, number][] = [];
  for (const [x0, y0, dx, dy] of passes) {
    const columns = Math.ceil((layout.width - x0) / dx);
    const rows = Math.ceil((layout.height - y0) / dy);
    if (columns > 0 && rows > 0) out.push([x0, y0, dx, dy, columns, rows]);
  }
  return out;
}

/**
 * Reverses the five PNG row filters in place. Every filter refers only to the row's earlier
 * bytes and to the row above (same subimage), both already reconstructed when a row is
 * reached, so one buffer suffices: no per-row copies, no second image-sized buffer.
 */
function unfilterInPlace(data: Uint8Array, layout: PngLayout): void {
  const bpp = filterStep(layout);
  const bitsPerPixel = COLOR_TYPES[layout.colorType]!.channels * layout.bitDepth;
  let pos = 0;
  for (const [, , , , columns, rows] of subimages(layout)) {
    const rowBytes = Math.ceil((columns * bitsPerPixel) / 8);
    for (let y = 0; y < rows; y++) {
      const filter = data[pos]!;
      const cur = pos + 1;
      const prev = y === 0 ? -1 : cur - rowBytes - 1; // -1: the row above is all zeros
      switch (filter) {
        case 0:
          break;
        case 1:
          for (let x = bpp; x < rowBytes; x++) data[cur + x] = (data[cur + x]! + data[cur + x - bpp]!) & 255;
          break;
        case 2:
          if (prev >= 0) for (let x = 0; x < rowBytes; x++) data[cur + x] = (data[cur + x]! + data[prev + x]!) & 255;
          break;
        case 3:
          for (let x = 0; x < rowBytes; x++) {
            const left = x >= bpp ? data[cur + x - bpp]! : 0;
            const up = prev >= 0 ? data[prev + x]! : 0;
            data[cur + x] = (data[cur + x]! + ((left + up) >> 1)) & 255;
          }
          break;
        case 4:
          for (let x = 0; x < rowBytes; x++) {
            const left = x >= bpp ? data[cur + x - bpp]! : 0;
            const up = prev >= 0 ? data[prev + x]! : 0;
            const upLeft = x >= bpp && prev >= 0 ? data[prev + x - bpp]! : 0;
            const p = left + up - upLeft;
            const pa = Math.abs(p - left);
            const pb = Math.abs(p - up);
            const pc = Math.abs(p - upLeft);
            const predicted = pa <= pb && pa <= pc ? left : pb <= pc ? up : upLeft;
            data[cur + x] = (data[cur + x]! + predicted) & 255;
          }
          break;
        default:
          throw new ImageDecodeError(`not a decodable PNG: unknown row filter ${filter}`);
      }
      pos = cur + rowBytes;
    }
  }
}

/**
 * Reconstructed samples to 8-bit RGBA, placing each subimage's pixels (Adam7) where they
 * belong. What pngjs did, so pixels are unchanged: 16-bit and 1/2/4-bit samples are scaled to
 * 8 bits with rounding; grey is copied to R, G and B; a tRNS colour (compared at the image's own
 * depth) becomes fully transparent black; palette indices take the palette's RGBA, and an index
 * past its end is refused.
 */
function toRgba(data: Uint8Array, png: PngChunks): Uint8Array {
  const { layout, palette, transparent } = png;
  const { width, colorType, bitDepth: depth } = layout;
  const channels = COLOR_TYPES[colorType]!.channels;
  const out = new Uint8Array(width * layout.height * 4);
  const max = (1 << depth) - 1;
  const scale = (s: number) => (depth === 8 ? s : Math.floor((s * 255) / max + 0.5));
  const fromPalette = (index: number, o: number) => {
    const entry = index * 4;
    if (entry >= palette!.length) throw new ImageDecodeError(`not a decodable PNG: palette index ${index} is past its ${palette!.length / 4} entries`);
    out[o] = palette![entry]!;
    out[o + 1] = palette![entry + 1]!;
    out[o + 2] = palette![entry + 2]!;
    out[o + 3] = palette![entry + 3]!;
  };
  const sample = [0, 0, 0, 0];
  let pos = 0;
  for (const [x0, y0, dx, dy, columns, rows] of subimages(layout)) {
    const rowBytes = Math.ceil((columns * channels * depth) / 8);
    const step = dx * 4;
    for (let y = 0; y < rows; y++) {
      const row = pos + 1;
      const first = ((y0 + y * dy) * width + x0) * 4;
      pos = row + rowBytes;
      // 8-bit images without tRNS (nearly all of them) take a direct path.
      if (depth === 8 && !transparent) {
        let i = row;
        let o = first;
        switch (colorType) {
          case 6:
            for (let x = 0; x < columns; x++, o += step, i += 4) {
              out[o] = data[i]!;
              out[o + 1] = data[i + 1]!;
              out[o + 2] = data[i + 2]!;
              out[o + 3] = data[i + 3]!;
            }
            break;
          case 2:
            for (let x = 0; x < columns; x++, o += step, i += 3) {
              out[o] = data[i]!;
              out[o + 1] = data[i + 1]!;
              out[o + 2] = data[i + 2]!;
              out[o + 3] = 255;
            }
            break;
          case 0:
            for (let x = 0; x < columns; x++, o += step, i++) {
              out[o] = out[o + 1] = out[o + 2] = data[i]!;
              out[o + 3] = 255;
            }
            break;
          case 4:
            for (let x = 0; x < columns; x++, o += step, i += 2) {
              out[o] = out[o + 1] = out[o + 2] = data[i]!;
              out[o + 3] = data[i + 1]!;
            }
            break;
          default:
            for (let x = 0; x < columns; x++, o += step, i++) fromPalette(data[i]!, o);
        }
        continue;
      }
      for (let x = 0, o = first; x < columns; x++, o += step) {
        // The pixel's samples at the image's own depth.
        for (let c = 0; c < channels; c++) {
          if (depth === 8) sample[c] = data[row + x * channels + c]!;
          else if (depth === 16) sample[c] = (data[row + (x * channels + c) * 2]! << 8) | data[row + (x * channels + c) * 2 + 1]!;
          else {
            const bit = x * depth; // depths below 8 have one channel
            sample[c] = (data[row + (bit >> 3)]! >> (8 - depth - (bit & 7))) & max;
          }
        }
        if (colorType === 3) {
          fromPalette(sample[0]!, o);
          continue;
        }
        const grey = channels < 3;
        if (transparent && (grey ? sample[0] === transparent[0] : sample[0] === transparent[0] && sample[1] === transparent[1] && sample[2] === transparent[2])) {
          out[o] = out[o + 1] = out[o + 2] = out[o + 3] = 0;
          continue;
        }
        const r = scale(sample[0]!);
        out[o] = r;
        out[o + 1] = grey ? r : scale(sample[1]!);
        out[o + 2] = grey ? r : scale(sample[2]!);
        out[o + 3] = channels === 2 ? scale(sample[1]!) : channels === 4 ? scale(sample[3]!) : 255;
      }
    }
  }
  return out;
}

/**
 * Encodes 8-bit RGBA as a PNG. The Sub filter alone (not pngjs' per-row search over all five)
 * is about three times faster and only a few percent larger on our smooth, grainy pictures.
 */
export function encodePng(img: Rgba): Uint8Array {
  if (img.data.length !== img.width * img.height * 4) {
    throw new RangeError(`RGBA buffer is ${img.data.length} bytes, expected ${img.width * img.height * 4}`);
  }
  const out = PNG.sync.write(
    { width: img.width, height: img.height, data: asBuffer(img.data) } as PNG,
    { colorType: 6, inputColorType: 6, inputHasAlpha: true, bitDepth: 8, filterType: 1 },
  );
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

/**
 * Whether a PNG carries transparency: colour type 4 (grey + alpha) or 6 (RGBA), or any colour
 * type with a tRNS chunk (how palette PNGs from optimisers such as pngquant store alpha).
 * This is the mask rule: a mask without transparency could never mark an area to repaint.
 * Reads chunk headers only; false for anything that is not a well-formed PNG up to IDAT.
 */
export function pngHasAlpha(bytes: Uint8Array): boolean {
  if (bytes.length < 33 || SIGNATURE.some((b, i) => bytes[i] !== b)) return false;
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const colorType = bytes[25];
  if (colorType === 4 || colorType === 6) return true;
  // tRNS must precede the first IDAT; walk the chunks up to there.
  let at = 8;
  while (at + 8 <= bytes.length) {
    const length = v.getUint32(at);
    const type = String.fromCharCode(bytes[at + 4]!, bytes[at + 5]!, bytes[at + 6]!, bytes[at + 7]!);
    if (type === "tRNS") return true;
    if (type === "IDAT" || type === "IEND") return false;
    at += 12 + length;
  }
  return false;
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
