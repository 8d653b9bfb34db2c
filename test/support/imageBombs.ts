/**
 * Hand-made hostile and unusual images for the decoder tests and benches: PNGs with any IHDR
 * over any zlib stream (the interlaced zeros bomb of issue 9), a zlib stream of N zeros built
 * in milliseconds, and a progressive JPEG made of nearly empty scans.
 */
import { crc32, deflateRawSync, deflateSync, constants as zlibConstants } from "node:zlib";

export const PNG_SIGNATURE = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

export function pngChunk(type: string, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + body.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, body.length);
  out.set(new TextEncoder().encode(type), 4);
  out.set(body, 8);
  v.setUint32(8 + body.length, crc32(out.subarray(4, 8 + body.length)));
  return out;
}

export function concatBytes(parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export interface Ihdr {
  width: number;
  height: number;
  bitDepth?: number;
  colorType?: number;
  interlaced?: boolean;
}

/** A PNG with this header over this zlib stream (one IDAT), optionally with PLTE and tRNS. */
export function pngWithZlib(h: Ihdr, zlib: Uint8Array, extra: { palette?: Uint8Array; trns?: Uint8Array } = {}): Uint8Array<ArrayBuffer> {
  const ihdr = new Uint8Array(13);
  const v = new DataView(ihdr.buffer);
  v.setUint32(0, h.width);
  v.setUint32(4, h.height);
  ihdr.set([h.bitDepth ?? 8, h.colorType ?? 6, 0, 0, h.interlaced ? 1 : 0], 8);
  return concatBytes([
    PNG_SIGNATURE,
    pngChunk("IHDR", ihdr),
    ...(extra.palette ? [pngChunk("PLTE", extra.palette)] : []),
    ...(extra.trns ? [pngChunk("tRNS", extra.trns)] : []),
    pngChunk("IDAT", zlib),
    pngChunk("IEND", new Uint8Array(0)),
  ]);
}

/** A PNG whose image data is exactly `raw` (filter bytes included), deflated. */
export function pngWithRaw(h: Ihdr, raw: Uint8Array, extra: { palette?: Uint8Array; trns?: Uint8Array } = {}): Uint8Array<ArrayBuffer> {
  return pngWithZlib(h, new Uint8Array(deflateSync(raw)), extra);
}

/**
 * A zlib stream that inflates to `total` zero bytes (a multiple of 1 MiB), about 1 KB per MiB.
 * Built from one full-flushed deflate of 1 MiB repeated (a full flush makes each copy
 * independent of the ones before), an empty final block, and the Adler-32 of the zeros.
 */
export function zerosZlib(total: number): Uint8Array<ArrayBuffer> {
  const MiB = 1 << 20;
  if (total % MiB !== 0) throw new RangeError("total must be a multiple of 1 MiB");
  const block = new Uint8Array(deflateRawSync(new Uint8Array(MiB), { level: 9, finishFlush: zlibConstants.Z_FULL_FLUSH }));
  const final = new Uint8Array(deflateRawSync(new Uint8Array(0))); // an empty final block
  const adler = new Uint8Array(4);
  // Adler-32 of n zeros: a stays 1, b grows by 1 per byte.
  new DataView(adler.buffer).setUint32(0, (((total % 65521) << 16) | 1) >>> 0);
  const parts: Uint8Array[] = [new Uint8Array([0x78, 0xda])];
  for (let n = 0; n < total; n += MiB) parts.push(block);
  parts.push(final, adler);
  return concatBytes(parts);
}

/**
 * Issue 9's bomb: an interlaced 64x64 RGBA PNG (16,504 bytes of image data allowed) whose IDAT
 * inflates to `inflated` bytes of zeros (1 GiB by default, in a 1 MB file).
 */
export function interlacedZerosBomb(inflated = 1 << 30): Uint8Array<ArrayBuffer> {
  return pngWithZlib({ width: 64, height: 64, bitDepth: 8, colorType: 6, interlaced: true }, zerosZlib(inflated));
}

/**
 * A progressive greyscale JPEG whose AC scans are each a handful of end-of-band runs: a few
 * dozen bytes per scan, and a walk over every block to decode each one.
 */
export function progressiveScanJpeg(width: number, height: number, acScans: number): Uint8Array<ArrayBuffer> {
  const out: number[] = [];
  const segment = (marker: number, body: number[]) => out.push(0xff, marker, (body.length + 2) >> 8, (body.length + 2) & 255, ...body);
  out.push(0xff, 0xd8);
  segment(0xdb, [0x00, ...new Array<number>(64).fill(1)]); // quantisation table 0: all ones
  segment(0xc2, [8, height >> 8, height & 255, width >> 8, width & 255, 1, 1, 0x11, 0]); // SOF2, one component
  const oneCode = [1, ...new Array<number>(15).fill(0)];
  segment(0xc4, [0x00, ...oneCode, 0x00]); // DC table 0: code '0' = difference category 0
  segment(0xc4, [0x10, ...oneCode, 0xe0]); // AC table 0: code '0' = end-of-band run, 14 extra bits
  const entropy = (bits: number[]) => {
    while (bits.length % 8) bits.push(1);
    const bytes: number[] = [];
    for (let i = 0; i < bits.length; i += 8) {
      let b = 0;
      for (let k = 0; k < 8; k++) b = (b << 1) | bits[i + k]!;
      bytes.push(b);
      if (b === 0xff) bytes.push(0); // byte stuffing
    }
    return bytes;
  };
  const blocks = Math.ceil(width / 8) * Math.ceil(height / 8);
  segment(0xda, [1, 1, 0x00, 0, 0, 0]); // DC scan: one bit per block
  out.push(...entropy(new Array<number>(blocks).fill(0)));
  const run = 16384 + 0x1555; // its 14 extra bits alternate, so no 0xFF bytes
  const acBits: number[] = [];
  for (let covered = 0; covered < blocks; covered += run) {
    acBits.push(0);
    for (let k = 13; k >= 0; k--) acBits.push((0x1555 >> k) & 1);
  }
  const acScan = entropy(acBits);
  for (let s = 0; s < acScans; s++) {
    segment(0xda, [1, 1, 0x00, 1, 63, 0]);
    for (const b of acScan) out.push(b);
  }
  out.push(0xff, 0xd9);
  return new Uint8Array(out);
}
