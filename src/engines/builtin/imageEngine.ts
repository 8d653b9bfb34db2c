/**
 * `builtin-image`: an offline, deterministic procedural renderer behind the same ImageEngine
 * interface as the upstream engines. It is for trying the service without any upstream; it is
 * not an AI model. Same prompt, size and inputs give the same bytes.
 *
 * Streamed jobs (partialImages 1–3) are drawn coarse to fine: each partial is the same picture
 * rendered at a fraction of the size (1/16, 1/8, 1/4 of each side for three partials; the last
 * partial is always at 1/4), scaled up bilinearly to the output size and put through the same
 * reference blend, repaint or restyle as the final image, then encoded as a PNG. The final image
 * does not depend on how many partials were shown.
 */
import { decodeImageOffThread, decodeScaledDown, encodePng, ImageDecodeError, type Rgba } from "../../core/image/codec";
import { releaseBytes } from "../../core/image/release";
import {
  EngineOutputInvalid,
  EngineTimeout,
  UpstreamRejected,
  type GeneratedImage,
  type ImageEngine,
  type ImageInput,
  type ImageJob,
  type InputProblem,
} from "../../core/engine";
import { accumulateReference, blendReferences, repaintMasked, resampleCover, restyle } from "./compose";
import { planScene, renderScene, type ScenePlan } from "./scene";
import { partialsWanted, reportProgress } from "../progress";

export const BUILTIN_MIN_SIDE = 64;
export const BUILTIN_MAX_SIDE = 2048;
/** `size: "auto"` on a generation. (Edits always keep the first image's size.) */
export const BUILTIN_AUTO_SIZE = { width: 1024, height: 1024 } as const;

export class BuiltinImageEngine implements ImageEngine {
  /** See edit(): a masked edit keeps every unmasked pixel, so the output never changes size. */
  readonly editKeepsImageSize = true;

  async generate(job: ImageJob): Promise<GeneratedImage> {
    const { width, height } = job.size ?? BUILTIN_AUTO_SIZE;
    if (!fits(width, BUILTIN_MIN_SIDE) || !fits(height, BUILTIN_MIN_SIDE)) {
      throw new UpstreamRejected(
        `the built-in engine draws sizes from ${BUILTIN_MIN_SIDE} to ${BUILTIN_MAX_SIDE} pixels per side, not ${width}x${height}`,
      );
    }
    const checkpoint = checkpointFor(job.signal);
    const plan = planScene(job.prompt);
    const options = { transparentSky: job.extra.background === "transparent", checkpoint };
    const references = await referenceMean(job.images, width, height, "reference image", 0, checkpoint);
    const withReferences = (scene: Rgba) => {
      if (references) blendReferences(scene, references);
      return scene;
    };
    await showPartials(job, plan, width, height, options, withReferences);
    const scene = withReferences(renderScene(plan, width, height, options));
    releaseBytes(references?.data);
    reportProgress(job, { fraction: 0.9 });
    return finish(scene, job, checkpoint);
  }

  /**
   * Output has the first image's dimensions whatever `size` says: a masked edit promises that
   * unmasked pixels stay identical, which resizing would break.
   */
  inputProblem(job: Omit<ImageJob, "signal">, kind: "generate" | "edit"): InputProblem | null {
    const base = job.images[0];
    if (kind === "edit" && base && (!fits(base.width, 1) || !fits(base.height, 1))) {
      return { image: 0, message: `the built-in engine edits images up to ${BUILTIN_MAX_SIDE}x${BUILTIN_MAX_SIDE} pixels; this one is ${base.width}x${base.height}` };
    }
    return null;
  }

  async edit(job: ImageJob): Promise<GeneratedImage> {
    const [first, ...others] = job.images;
    if (!first) throw new UpstreamRejected("an edit needs at least one image");
    const checkpoint = checkpointFor(job.signal);
    const base = await decodeInput(first, "image 1");
    if (!fits(base.width, 1) || !fits(base.height, 1)) {
      throw new UpstreamRejected(
        `the built-in engine edits images up to ${BUILTIN_MAX_SIDE}x${BUILTIN_MAX_SIDE}; this one is ${base.width}x${base.height}`,
      );
    }
    const mask = job.mask ? await decodeInput(job.mask, "mask") : undefined;
    if (mask && (mask.width !== base.width || mask.height !== base.height)) {
      throw new UpstreamRejected(`the mask is ${mask.width}x${mask.height} but the image is ${base.width}x${base.height}`);
    }
    await yieldToEventLoop();
    checkpoint();
    // The scene is drawn at the image's size; any further images act as references for it.
    const plan = planScene(job.prompt);
    const references = await referenceMean(others, base.width, base.height, "image", 1, checkpoint);
    const compose = (scene: Rgba) => {
      if (references) blendReferences(scene, references);
      return mask ? repaintMasked(base, scene, mask) : restyle(base, scene);
    };
    await showPartials(job, plan, base.width, base.height, { checkpoint }, compose);
    const scene = renderScene(plan, base.width, base.height, { checkpoint });
    const edited = compose(scene);
    // Canvas-sized each (an edit's canvas is its first image, up to 2048x2048): given back now.
    for (const done of [scene, base, mask, references]) releaseBytes(done?.data);
    reportProgress(job, { fraction: 0.9 });
    return finish(edited, job, checkpoint);
  }
}

/**
 * Two references are decoded at once: the native decoder runs off the JS thread, so the second
 * keeps another core busy meanwhile (ten 9 MB references: about a quarter less time on two
 * cores); each decode holds about its full-size pixels until it is scaled down, so no more.
 */
const REFERENCE_DECODES_AT_ONCE = 2;

/**
 * Decodes references (each may be large) at most REFERENCE_DECODES_AT_ONCE at a time, scales
 * each to cover the canvas and keeps their running mean, in order: one extra canvas-sized buffer
 * however many there are.
 */
async function referenceMean(images: ImageInput[], width: number, height: number, label: string, offset: number, checkpoint: () => void): Promise<Rgba | undefined> {
  let mean: Rgba | undefined;
  const decodes: (Promise<Rgba> | undefined)[] = [];
  const startDecode = (i: number) => {
    if (i >= images.length) return;
    const decode = decodeReference(images[i]!, width, height, `${label} ${i + 1 + offset}`);
    // A job stopped by its checkpoint leaves the decodes ahead of it unawaited.
    decode.catch(() => {});
    decodes[i] = decode;
  };
  for (let i = 0; i < REFERENCE_DECODES_AT_ONCE; i++) startDecode(i);
  for (let i = 0; i < images.length; i++) {
    const decoded = await decodes[i]!;
    decodes[i] = undefined;
    startDecode(i + REFERENCE_DECODES_AT_ONCE);
    await yieldToEventLoop();
    checkpoint();
    const fitted = resampleCover(decoded, width, height);
    releaseBytes(decoded.data);
    if (mean) {
      accumulateReference(mean, fitted, i + 1);
      releaseBytes(fitted.data);
    } else mean = fitted;
  }
  return mean;
}

/**
 * The partial images of a streamed job, coarse to fine: the scene at 1/2^(n-k+2) of each side
 * (k = 1..n, so the last partial is at 1/4), scaled up to the output size, composed like the
 * final image and encoded as a PNG. Partials of the same job come from the same plan, so they
 * converge on the final picture.
 */
async function showPartials(
  job: ImageJob,
  plan: ScenePlan,
  width: number,
  height: number,
  options: { transparentSky?: boolean; checkpoint: () => void },
  compose: (sceneAtFullSize: Rgba) => Rgba,
): Promise<void> {
  const n = partialsWanted(job);
  for (let k = 1; k <= n; k++) {
    const divisor = 2 ** (n - k + 2);
    const coarse = renderScene(plan, Math.max(1, Math.round(width / divisor)), Math.max(1, Math.round(height / divisor)), options);
    const picture = compose(resampleCover(coarse, width, height));
    await yieldToEventLoop();
    options.checkpoint();
    const bytes = encodePng(picture);
    releaseBytes(picture.data);
    reportProgress(job, { fraction: (0.5 * k) / n, partial: { bytes, mime: "image/png", width, height } });
    await yieldToEventLoop();
    options.checkpoint();
  }
}

/** Encodes, then proves the PNG decodes back to exactly the pixels drawn before handing it out. */
async function finish(img: Rgba, job: ImageJob, checkpoint: () => void): Promise<GeneratedImage> {
  await yieldToEventLoop();
  checkpoint();
  const bytes = encodePng(img);
  await yieldToEventLoop();
  let back: Rgba;
  try {
    back = await decodeImageOffThread(bytes, "image/png");
  } catch (e) {
    throw new EngineOutputInvalid(`the built-in engine's PNG does not decode: ${(e as Error).message}`);
  }
  const same = back.width === img.width && back.height === img.height && Buffer.compare(back.data, img.data) === 0;
  // The picture and its decoded copy are done with; only the PNG goes on.
  releaseBytes(back.data);
  releaseBytes(img.data);
  if (!same) throw new EngineOutputInvalid("the built-in engine's PNG does not decode to the picture it drew");
  return { bytes, mime: "image/png", width: img.width, height: img.height, revisedPrompt: job.prompt };
}

function fits(side: number, min: number): boolean {
  return Number.isInteger(side) && side >= min && side <= BUILTIN_MAX_SIDE;
}

/**
 * Inputs were checked by the http layer; a decode failure here still must not look like our
 * fault. Decoded in the decode pool: inputs may be up to 40 megapixels.
 */
async function decodeInput(input: ImageInput, label: string): Promise<Rgba> {
  try {
    return await decodeImageOffThread(input.bytes, input.mime);
  } catch (e) {
    if (e instanceof ImageDecodeError) throw new UpstreamRejected(`${label} could not be decoded: ${e.message}`);
    throw e;
  }
}

/**
 * A reference larger than the canvas is decoded once, already scaled down to just cover it
 * (native, off the JS thread: core/image/codec decodeScaledDown), so a 10 MB upload never
 * becomes its full-size RGBA here; a smaller one is decoded as it is. References only blend in
 * at half strength, so the scaler's own filter is invisible; an edit's base image, whose pixels
 * must stay exact, always goes through decodeInput.
 */
async function decodeReference(input: ImageInput, width: number, height: number, label: string): Promise<Rgba> {
  const scale = Math.max(width / input.width, height / input.height);
  if (scale < 1) {
    const scaled = await decodeScaledDown(input.bytes, Math.max(1, Math.ceil(input.width * scale)), Math.max(1, Math.ceil(input.height * scale)));
    if (scaled) return scaled;
  }
  return decodeInput(input, label);
}

/** Stops between bands of rows once the job's deadline (or the server's shutdown) aborts it. */
function checkpointFor(signal: AbortSignal): () => void {
  return () => {
    if (signal.aborted) throw new EngineTimeout("the built-in engine stopped because the request was cancelled");
  };
}

/**
 * Rendering is synchronous work on the event loop; yielding between phases (a few hundred ms
 * each at 2048x2048) lets other requests' I/O through in the meantime.
 */
function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
