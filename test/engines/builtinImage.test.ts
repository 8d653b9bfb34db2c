import { describe, expect, test } from "bun:test";
import { encode as encodeJpeg } from "jpeg-js";
import { decodeImage, encodePng, pngHasAlpha, type Rgba } from "../../src/core/image/codec";
import { BuiltinImageEngine } from "../../src/engines/builtin/imageEngine";
import { BUILTIN_IMAGE, BUILTIN_SOURCE, type CatalogModel } from "../../src/core/models";
import { EngineTimeout, UpstreamRejected, type ImageInput, type ImageJob, type ProgressReport } from "../../src/core/engine";

const engine = new BuiltinImageEngine();
const model: CatalogModel = { id: BUILTIN_IMAGE, kind: "image", ownedBy: "atelier", created: 0, source: BUILTIN_SOURCE, upstreamModel: BUILTIN_IMAGE, params: {}, price: 1 };

function job(partial: Partial<ImageJob>): ImageJob {
  return { model, prompt: "a quiet lake", size: null, quality: "auto", images: [], extra: {}, signal: new AbortController().signal, ...partial };
}

function pngInput(img: Rgba): ImageInput {
  return { bytes: encodePng(img), mime: "image/png", width: img.width, height: img.height };
}

function solid(width: number, height: number, rgba: [number, number, number, number]): Rgba {
  const data = new Uint8Array(width * height * 4);
  for (let i = 0; i < data.length; i += 4) data.set(rgba, i);
  return { width, height, data };
}

/** A busy input picture, so "unchanged" cannot pass by accident of a flat colour. */
function checker(width: number, height: number): Rgba {
  const data = new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const on = ((x >> 3) + (y >> 3)) % 2 === 0;
      data.set(on ? [250, (x * 3) & 255, 10, 255] : [5, 40, (y * 5) & 255, 200 + (x % 50)], (y * width + x) * 4);
    }
  }
  return { width, height, data };
}

const decoded = (bytes: Uint8Array) => decodeImage(bytes, "image/png");
const differingPixels = (a: Rgba, b: Rgba) => {
  let n = 0;
  for (let i = 0; i < a.data.length; i += 4) {
    if (a.data[i] !== b.data[i] || a.data[i + 1] !== b.data[i + 1] || a.data[i + 2] !== b.data[i + 2] || a.data[i + 3] !== b.data[i + 3]) n++;
  }
  return n;
};

describe("generate", () => {
  test("returns a real PNG of exactly the requested size, for square, wide, tall and extreme sizes", async () => {
    for (const [width, height] of [[64, 64], [320, 200], [96, 500], [2048, 64], [257, 1031]] as const) {
      const out = await engine.generate(job({ size: { width, height } }));
      expect(out.mime).toBe("image/png");
      expect([out.width, out.height]).toEqual([width, height]);
      const img = decoded(out.bytes);
      expect([img.width, img.height]).toEqual([width, height]);
    }
  });

  test("size auto gives 1024x1024 and the prompt comes back as revisedPrompt", async () => {
    const out = await engine.generate(job({ prompt: "a lighthouse at dusk" }));
    expect([out.width, out.height]).toEqual([1024, 1024]);
    expect(decoded(out.bytes).width).toBe(1024);
    expect(out.revisedPrompt).toBe("a lighthouse at dusk");
  });

  test("the same prompt gives the same bytes; different prompts give clearly different pictures", async () => {
    const size = { width: 160, height: 120 };
    const a1 = await engine.generate(job({ prompt: "mountains at sunset", size }));
    const a2 = await engine.generate(job({ prompt: "mountains at sunset", size }));
    const b = await engine.generate(job({ prompt: "a green forest by the sea at night", size }));
    expect(Buffer.compare(a1.bytes, a2.bytes)).toBe(0);
    const pa = decoded(a1.bytes);
    const pb = decoded(b.bytes);
    expect(differingPixels(pa, pb)).toBeGreaterThan(pa.width * pa.height * 0.9);
    expect(meanAbsDiff(pa, pb)).toBeGreaterThan(20);
  });

  test("the picture is not flat: it has many colours", async () => {
    const img = decoded((await engine.generate(job({ prompt: "abstract bubbles", size: { width: 256, height: 256 } }))).bytes);
    const colours = new Set<number>();
    for (let i = 0; i < img.data.length; i += 4) colours.add((img.data[i]! << 16) | (img.data[i + 1]! << 8) | img.data[i + 2]!);
    expect(colours.size).toBeGreaterThan(500);
  });

  test("a reference image is blended in: the output moves towards it", async () => {
    const size = { width: 128, height: 128 };
    const plain = decoded((await engine.generate(job({ size }))).bytes);
    const red = solid(40, 30, [255, 0, 0, 255]);
    const withRef = decoded((await engine.generate(job({ size, images: [pngInput(red)] }))).bytes);
    expect(differingPixels(plain, withRef)).toBeGreaterThan(128 * 128 * 0.9);
    expect(meanChannel(withRef, 0) - meanChannel(plain, 0)).toBeGreaterThan(40);
    expect(meanChannel(withRef, 1)).toBeLessThan(meanChannel(plain, 1));
  });

  test("JPEG references work, and a second reference changes the result again", async () => {
    const size = { width: 96, height: 96 };
    const blueJpeg = encodeJpeg({ width: 32, height: 32, data: solid(32, 32, [0, 0, 255, 255]).data }, 90);
    const jpegRef: ImageInput = { bytes: new Uint8Array(blueJpeg.data), mime: "image/jpeg", width: 32, height: 32 };
    const one = decoded((await engine.generate(job({ size, images: [jpegRef] }))).bytes);
    const two = decoded((await engine.generate(job({ size, images: [jpegRef, pngInput(solid(8, 8, [255, 255, 0, 255]))] }))).bytes);
    expect(meanChannel(one, 2)).toBeGreaterThan(meanChannel(two, 2));
    expect(meanChannel(two, 0)).toBeGreaterThan(meanChannel(one, 0) + 40);
  });

  test("background transparent leaves the sky transparent and the ground opaque", async () => {
    const out = await engine.generate(job({ prompt: "mountains", size: { width: 128, height: 128 }, extra: { background: "transparent" } }));
    expect(pngHasAlpha(out.bytes)).toBe(true);
    const img = decoded(out.bytes);
    expect(img.data[3]).toBe(0); // top-left corner: sky
    expect(img.data[img.data.length - 1]).toBe(255); // bottom-right corner: nearest ridge
  });

  test("sizes outside 64..2048 are rejected, not silently changed", async () => {
    await expect(engine.generate(job({ size: { width: 63, height: 100 } }))).rejects.toBeInstanceOf(UpstreamRejected);
    await expect(engine.generate(job({ size: { width: 100, height: 2049 } }))).rejects.toBeInstanceOf(UpstreamRejected);
  });

  test("an aborted job stops with EngineTimeout", async () => {
    const controller = new AbortController();
    controller.abort();
    await expect(engine.generate(job({ signal: controller.signal }))).rejects.toBeInstanceOf(EngineTimeout);
  });
});

describe("edit", () => {
  const W = 120;
  const H = 90;
  const input = checker(W, H);
  /** Opaque everywhere except a transparent rectangle and a half-transparent strip. */
  const mask = solid(W, H, [0, 0, 0, 255]);
  for (let y = 20; y < 60; y++) for (let x = 30; x < 80; x++) mask.data[(y * W + x) * 4 + 3] = 0;
  for (let y = 70; y < 80; y++) for (let x = 0; x < W; x++) mask.data[(y * W + x) * 4 + 3] = 128;

  test("masked edit: every pixel where the mask is opaque is identical to the input, all four bytes; the transparent area is repainted", async () => {
    const out = await engine.edit(job({ images: [pngInput(input)], mask: pngInput(mask), size: { width: 512, height: 512 } }));
    expect([out.width, out.height]).toEqual([W, H]);
    const img = decoded(out.bytes);
    expect([img.width, img.height]).toEqual([W, H]);
    let kept = 0;
    let changedInHole = 0;
    let hole = 0;
    for (let p = 0; p < W * H; p++) {
      const i = p * 4;
      const alpha = mask.data[i + 3]!;
      const same = [0, 1, 2, 3].every((k) => img.data[i + k] === input.data[i + k]);
      if (alpha === 255) {
        expect(same).toBe(true);
        kept++;
      } else if (alpha === 0) {
        hole++;
        if (!same) changedInHole++;
      }
    }
    expect(kept).toBe(W * H - 50 * 40 - W * 10);
    expect(changedInHole).toBeGreaterThan(hole * 0.95);
    // Repainted pixels are opaque, even where the input was partly transparent.
    expect(img.data[(30 * W + 31) * 4 + 3]).toBe(255);
  });

  test("a JPEG base keeps its decoded pixels outside the mask", async () => {
    const jpeg = encodeJpeg({ width: W, height: H, data: input.data }, 85);
    const base: ImageInput = { bytes: new Uint8Array(jpeg.data), mime: "image/jpeg", width: W, height: H };
    const before = decodeImage(base.bytes, "image/jpeg");
    const img = decoded((await engine.edit(job({ images: [base], mask: pngInput(mask) }))).bytes);
    for (let p = 0; p < W * H; p++) {
      if (mask.data[p * 4 + 3] !== 255) continue;
      for (let k = 0; k < 4; k++) expect(img.data[p * 4 + k]).toBe(before.data[p * 4 + k]!);
    }
  });

  test("unmasked edit restyles the whole picture but keeps its size, alpha and some of its look", async () => {
    const out = await engine.edit(job({ images: [pngInput(input)], prompt: "pink candy clouds" }));
    const img = decoded(out.bytes);
    expect([img.width, img.height]).toEqual([W, H]);
    expect(differingPixels(img, input)).toBeGreaterThan(W * H * 0.9);
    for (let p = 0; p < W * H; p++) expect(img.data[p * 4 + 3]).toBe(input.data[p * 4 + 3]!);
    // Still correlated with the input: the checkerboard's bright squares stay brighter in red.
    const onSquare = img.data[(4 * W + 4) * 4]!; // (4,4) is on a red square
    const offSquare = img.data[(4 * W + 12) * 4]!; // (12,4) is on a dark square
    expect(onSquare - offSquare).toBeGreaterThan(80);
  });

  test("extra images act as references for the repainted area; the same inputs give the same bytes", async () => {
    const a = await engine.edit(job({ images: [pngInput(input)], mask: pngInput(mask) }));
    const b = await engine.edit(job({ images: [pngInput(input), pngInput(solid(10, 10, [0, 255, 0, 255]))], mask: pngInput(mask) }));
    const again = await engine.edit(job({ images: [pngInput(input)], mask: pngInput(mask) }));
    expect(Buffer.compare(a.bytes, again.bytes)).toBe(0);
    const ia = decoded(a.bytes);
    const ib = decoded(b.bytes);
    const i = (40 * W + 50) * 4; // inside the hole
    expect(ib.data[i + 1]! - ia.data[i + 1]!).toBeGreaterThan(40);
  });

  test("a mask of another size, and a base larger than 2048 per side, are rejected", async () => {
    await expect(engine.edit(job({ images: [pngInput(input)], mask: pngInput(solid(W, H + 1, [0, 0, 0, 0])) }))).rejects.toBeInstanceOf(
      UpstreamRejected,
    );
    await expect(engine.edit(job({ images: [pngInput(solid(2049, 2, [1, 2, 3, 255]))] }))).rejects.toBeInstanceOf(UpstreamRejected);
    await expect(engine.edit(job({ images: [] }))).rejects.toBeInstanceOf(UpstreamRejected);
  });
});

describe("progressive rendering (streamed jobs)", () => {
  const collect = () => {
    const reports: ProgressReport[] = [];
    return { reports, onProgress: (r: ProgressReport) => reports.push(r) };
  };
  const partialsOf = (reports: ProgressReport[]) => reports.flatMap((r) => (r.partial ? [r.partial] : []));

  test("partialImages n gives exactly n real PNG partials of the output size, coarse to fine, and the same final bytes as without them", async () => {
    const plain = await engine.generate(job({ prompt: "mountains at night", size: { width: 192, height: 128 } }));
    const finalPixels = decoded(plain.bytes);
    for (const n of [0, 1, 2, 3]) {
      const { reports, onProgress } = collect();
      const out = await engine.generate(job({ prompt: "mountains at night", size: { width: 192, height: 128 }, partialImages: n, onProgress }));
      expect(Buffer.compare(out.bytes, plain.bytes)).toBe(0);
      const partials = partialsOf(reports);
      expect(partials).toHaveLength(n);
      let previous = Number.POSITIVE_INFINITY;
      for (const p of partials) {
        expect(p.mime).toBe("image/png");
        expect([p.width, p.height]).toEqual([192, 128]);
        const img = decoded(p.bytes);
        expect([img.width, img.height]).toEqual([192, 128]);
        // Each partial is closer to the final picture than the one before, and none is it yet.
        const distance = meanAbsDiff(img, finalPixels);
        expect(distance).toBeGreaterThan(0);
        expect(distance).toBeLessThan(previous);
        previous = distance;
      }
      // Fractions only go up and stay within 0..1.
      const fractions = reports.map((r) => r.fraction!);
      expect(fractions).toEqual([...fractions].sort((a, b) => a - b));
      for (const f of fractions) expect(f >= 0 && f <= 1).toBe(true);
    }
  });

  test("more than 3 partials asked for gives 3; a listener that throws does not stop the engine", async () => {
    const { reports, onProgress } = collect();
    await engine.generate(job({ size: { width: 64, height: 64 }, partialImages: 9, onProgress }));
    expect(partialsOf(reports)).toHaveLength(3);
    const out = await engine.generate(job({ size: { width: 64, height: 64 }, partialImages: 2, onProgress: () => { throw new Error("listener bug"); } }));
    expect(out.width).toBe(64);
  });

  test("a masked edit's partials already keep every pixel outside the mask", async () => {
    const W = 96;
    const H = 64;
    const input = checker(W, H);
    const mask = solid(W, H, [0, 0, 0, 255]);
    for (let y = 10; y < 40; y++) for (let x = 20; x < 70; x++) mask.data[(y * W + x) * 4 + 3] = 0;
    const { reports, onProgress } = collect();
    const out = await engine.edit(job({ images: [pngInput(input)], mask: pngInput(mask), partialImages: 2, onProgress }));
    const plain = await engine.edit(job({ images: [pngInput(input)], mask: pngInput(mask) }));
    expect(Buffer.compare(out.bytes, plain.bytes)).toBe(0);
    const partials = partialsOf(reports);
    expect(partials).toHaveLength(2);
    for (const p of partials) {
      const img = decoded(p.bytes);
      for (let i = 0; i < img.data.length; i += 4) {
        if (mask.data[i + 3] === 255) expect(img.data.subarray(i, i + 4)).toEqual(input.data.subarray(i, i + 4));
      }
      expect(differingPixels(img, input)).toBeGreaterThan(0);
    }
  });

  test("an abort between partials stops with EngineTimeout", async () => {
    const controller = new AbortController();
    const promise = engine.generate(job({ size: { width: 256, height: 256 }, partialImages: 3, signal: controller.signal, onProgress: () => controller.abort() }));
    await expect(promise).rejects.toBeInstanceOf(EngineTimeout);
  });
});

function meanChannel(img: Rgba, channel: number): number {
  let sum = 0;
  for (let i = channel; i < img.data.length; i += 4) sum += img.data[i]!;
  return sum / (img.data.length / 4);
}

function meanAbsDiff(a: Rgba, b: Rgba): number {
  let sum = 0;
  for (let i = 0; i < a.data.length; i++) if (i % 4 !== 3) sum += Math.abs(a.data[i]! - b.data[i]!);
  return sum / ((a.data.length / 4) * 3);
}
