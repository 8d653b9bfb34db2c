/**
 * Test helpers for images: real PNGs made and read with pngjs, data URLs, and a controllable
 * image engine for tests that need slow or failing generations.
 */
import { PNG } from "pngjs";
import { UpstreamFailed, type GeneratedImage, type ImageEngine, type ImageJob } from "../../src/core/engine";

export interface Pixels {
  width: number;
  height: number;
  data: Uint8Array;
}

/** A PNG whose pixel (x, y) is color(x, y) = [r, g, b, a]. colorType 6 (RGBA) unless alpha=false (2, RGB). */
export function makePng(width: number, height: number, color: (x: number, y: number) => [number, number, number, number] = () => [200, 80, 40, 255], alpha = true): Uint8Array<ArrayBuffer> {
  const png = new PNG({ width, height, colorType: alpha ? 6 : 2, inputHasAlpha: true });
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const [r, g, b, a] = color(x, y);
      const i = (y * width + x) * 4;
      png.data[i] = r;
      png.data[i + 1] = g;
      png.data[i + 2] = b;
      png.data[i + 3] = a;
    }
  }
  return new Uint8Array(PNG.sync.write(png, { colorType: alpha ? 6 : 2, inputHasAlpha: true }));
}

export function readPng(bytes: Uint8Array): Pixels {
  const png = PNG.sync.read(Buffer.from(bytes));
  return { width: png.width, height: png.height, data: new Uint8Array(png.data) };
}

export function dataUrl(bytes: Uint8Array, type = "png"): string {
  return `data:image/${type};base64,${Buffer.from(bytes).toString("base64")}`;
}

/** An engine whose behaviour each test sets: how long it takes, and whether it fails. */
export class ControlledEngine implements ImageEngine {
  calls: ImageJob[] = [];
  /** Called per job; return an image, throw to fail. Defaults to a small PNG of the requested size. */
  behave: (job: ImageJob) => Promise<GeneratedImage> = async (job) => this.png(job);
  /** The engine's own input limits (ImageEngine.inputProblem); none unless a test sets one. */
  inputProblem?: ImageEngine["inputProblem"];
  /** Resolvers of jobs held by `hold()`. */
  private held: (() => void)[] = [];

  png(job: ImageJob): GeneratedImage {
    const w = job.size?.width ?? 64;
    const h = job.size?.height ?? 64;
    return { bytes: makePng(w, h), mime: "image/png", width: w, height: h };
  }

  /** Makes every job wait until releaseAll(); then it succeeds, or fails with UpstreamFailed. */
  hold(outcome: "succeed" | "fail" = "succeed"): void {
    this.behave = (job) =>
      new Promise<GeneratedImage>((resolve, reject) =>
        this.held.push(() => (outcome === "succeed" ? resolve(this.png(job)) : reject(new UpstreamFailed("held job failed")))),
      );
  }

  get waiting(): number {
    return this.held.length;
  }

  releaseAll(): void {
    const h = this.held;
    this.held = [];
    for (const r of h) r();
  }

  generate(job: ImageJob): Promise<GeneratedImage> {
    this.calls.push(job);
    return this.behave(job);
  }

  edit(job: ImageJob): Promise<GeneratedImage> {
    this.calls.push(job);
    return this.behave(job);
  }
}
