import { describe, expect, test } from "bun:test";
import jpeg from "jpeg-js";
import { checkMask, checkQuality, ImageInputError, imageFromBytes, imageFromDataUrl, parseSize, sniffImageMime } from "../../src/core/imageInput";
import { MAX_IMAGE_BYTES } from "../../src/core/limits";
import type { CatalogModel } from "../../src/core/models";
import { dataUrl, makePng } from "../support/images";

const builtin: CatalogModel = { id: "builtin-image", kind: "image", ownedBy: "atelier", created: 0, source: { kind: "builtin" }, upstreamModel: "builtin-image", params: {}, price: 1 };
const narrow: CatalogModel = { ...builtin, id: "narrow", sizes: ["1024x1024", "1536x1024"], qualities: ["low", "high"] };

function fails(fn: () => unknown): ImageInputError {
  try {
    fn();
  } catch (e) {
    if (e instanceof ImageInputError) return e;
    throw e;
  }
  throw new Error("expected an ImageInputError");
}

/** A VP8L (lossless WebP) header for a width x height image; enough for sniffing and dimensions. */
function webpHeader(width: number, height: number): Uint8Array {
  const b = new Uint8Array(40);
  b.set(new TextEncoder().encode("RIFF"), 0);
  b.set(new TextEncoder().encode("WEBPVP8L"), 8);
  b[20] = 0x2f;
  const bits = (width - 1) | ((height - 1) << 14);
  new DataView(b.buffer).setUint32(21, bits >>> 0, true);
  return b;
}

describe("image inputs", () => {
  test("PNG, JPEG and WebP are sniffed and their dimensions read from the header", () => {
    expect(imageFromDataUrl(dataUrl(makePng(70, 30)), "x")).toMatchObject({ mime: "image/png", width: 70, height: 30 });
    const jpg = new Uint8Array(jpeg.encode({ width: 33, height: 21, data: Buffer.alloc(33 * 21 * 4, 128) }, 80).data);
    expect(imageFromDataUrl(dataUrl(jpg, "jpg"), "x")).toMatchObject({ mime: "image/jpeg", width: 33, height: 21 });
    expect(imageFromDataUrl(dataUrl(jpg, "JPEG"), "x").mime).toBe("image/jpeg");
    expect(imageFromBytes(webpHeader(300, 200), "x")).toMatchObject({ mime: "image/webp", width: 300, height: 200 });
    expect(sniffImageMime(new TextEncoder().encode("GIF89a"))).toBeNull();
  });

  test("the size limit is exact and checked before decoding", () => {
    const header = makePng(8, 8).subarray(0, 33);
    const exactly = new Uint8Array(MAX_IMAGE_BYTES);
    exactly.set(header);
    expect(imageFromDataUrl(dataUrl(exactly), "x").width).toBe(8);
    const over = new Uint8Array(MAX_IMAGE_BYTES + 1);
    over.set(header);
    expect(fails(() => imageFromDataUrl(dataUrl(over), "reference_images[3]"))).toMatchObject({ param: "reference_images[3]", reason: "image_too_large" });
    // Far too long and not even valid base64: refused by length alone.
    expect(fails(() => imageFromDataUrl(`data:image/png;base64,${"!".repeat(20 * 1024 * 1024)}`, "x")).reason).toBe("image_too_large");
  });

  test("base64 is validated strictly", () => {
    const good = dataUrl(makePng(4, 4));
    for (const bad of [good + "A", good + "AAAA", good.slice(0, 40) + " " + good.slice(41), good.slice(0, 50) + "-" + good.slice(51), good.slice(0, 50) + "_" + good.slice(51), "data:image/png;base64,"]) {
      expect(fails(() => imageFromDataUrl(bad, "p")).reason).toBe("invalid_base64");
    }
  });

  test("declared type and bytes must agree; only PNG/JPEG/WebP", () => {
    const png = makePng(4, 4);
    expect(fails(() => imageFromDataUrl(dataUrl(png, "webp"), "m")).reason).toBe("image_type_mismatch");
    expect(fails(() => imageFromDataUrl(dataUrl(png, "gif"), "m")).reason).toBe("invalid_image_format");
    expect(fails(() => imageFromDataUrl("data:text/plain;base64,AAAA", "m")).reason).toBe("invalid_image_url");
    expect(fails(() => imageFromBytes(png.subarray(0, 16), "m")).reason).toBe("invalid_image");
  });

  test("mask: PNG with alpha, same dimensions as the first image", () => {
    const base = imageFromBytes(makePng(10, 10), "image");
    checkMask(imageFromBytes(makePng(10, 10, () => [0, 0, 0, 0]), "mask"), base);
    expect(fails(() => checkMask(imageFromBytes(makePng(10, 10, undefined, false), "mask"), base)).param).toBe("mask");
    expect(fails(() => checkMask(imageFromBytes(makePng(10, 11), "mask"), base)).message).toMatch(/10x11.*10x10/);
  });
});

describe("size and quality", () => {
  test("any WxH from 64 to 2048 on the built-in model; auto or absent means the engine picks", () => {
    expect(parseSize("64x2048", builtin)).toEqual({ width: 64, height: 2048 });
    expect(parseSize("auto", builtin)).toBeNull();
    expect(parseSize(undefined, builtin)).toBeNull();
    for (const bad of ["63x64", "64x2049", "64X64", "64x", "x64", "064x64", " 64x64", "1e3x64"]) expect(fails(() => parseSize(bad, builtin)).param).toBe("size");
  });

  test("a model's own size and quality lists narrow what it accepts", () => {
    expect(parseSize("1536x1024", narrow)).toEqual({ width: 1536, height: 1024 });
    expect(fails(() => parseSize("512x512", narrow)).message).toMatch(/'1024x1024', '1536x1024'/);
    expect(checkQuality("high", narrow)).toBe("high");
    expect(checkQuality(undefined, narrow)).toBe("auto");
    expect(fails(() => checkQuality("hd", narrow)).param).toBe("quality");
    expect(checkQuality("hd", builtin)).toBe("hd");
  });
});
