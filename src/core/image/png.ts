/**
 * PNG through pngjs (pure JS): every colour type, bit depth 1–16 and Adam7 interlacing decode
 * to 8-bit RGBA; we encode 8-bit RGBA (colour type 6) only.
 */
import { PNG } from "pngjs";
import { ImageDecodeError, type Rgba } from "./rgba";

const SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

export function decodePng(bytes: Uint8Array): Rgba {
  try {
    // skipRescale false: 16-bit samples come out scaled to 8 bits, like every other codec here.
    const png = PNG.sync.read(asBuffer(bytes), { skipRescale: false, checkCRC: true });
    return { width: png.width, height: png.height, data: new Uint8Array(png.data.buffer, png.data.byteOffset, png.data.byteLength) };
  } catch (e) {
    throw new ImageDecodeError(`not a decodable PNG: ${(e as Error).message}`);
  }
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
