/**
 * `builtin-image`: an offline, deterministic procedural renderer behind the same ImageEngine
 * interface as the upstream engines. It is for trying the service without any upstream; it is
 * not an AI model. Same prompt, size and inputs give the same bytes.
 */
import { decodeImageOffThread, encodePng, ImageDecodeError, type Rgba } from "../../core/image/codec";
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
import { planScene, renderScene } from "./scene";

export const BUILTIN_MIN_SIDE = 64;
export const BUILTIN_MAX_SIDE = 2048;
/** `size: "auto"` on a generation. (Edits always keep the first image's size.) */
export const BUILTIN_AUTO_SIZE = { width: 1024, height: 1024 } as const;

export class BuiltinImageEngine implements ImageEngine {
  async generate(job: ImageJob): Promise<GeneratedImage> {
    const { width, height } = job.size ?? BUILTIN_AUTO_SIZE;
    if (!fits(width, BUILTIN_MIN_SIDE) || !fits(height, BUILTIN_MIN_SIDE)) {
      throw new UpstreamRejected(
        `the built-in engine draws sizes from ${BUILTIN_MIN_SIDE} to ${BUILTIN_MAX_SIDE} pixels per side, not ${width}x${height}`,
      );
    }
    const checkpoint = checkpointFor(job.signal);
    const scene = renderScene(planScene(job.prompt), width, height, {
      transparentSky: job.extra.background === "transparent",
      checkpoint,
    });
    await this.blendIn(scene, job.images, "reference image", 0, checkpoint);
    return this.finish(scene, job, checkpoint);
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
    const scene = renderScene(planScene(job.prompt), base.width, base.height, { checkpoint });
    await this.blendIn(scene, others, "image", 1, checkpoint);
    const edited = mask ? repaintMasked(base, scene, mask) : restyle(base, scene);
    return this.finish(edited, job, checkpoint);
  }

  /** Decodes references one at a time (each may be large) and blends their mean into the scene. */
  private async blendIn(scene: Rgba, images: ImageInput[], label: string, offset: number, checkpoint: () => void): Promise<void> {
    let mean: Rgba | undefined;
    for (const [i, image] of images.entries()) {
      const decoded = await decodeInput(image, `${label} ${i + 1 + offset}`);
      await yieldToEventLoop();
      checkpoint();
      const fitted = resampleCover(decoded, scene.width, scene.height);
      if (mean) accumulateReference(mean, fitted, i + 1);
      else mean = fitted;
    }
    if (mean) blendReferences(scene, mean);
  }

  /** Encodes, then proves the PNG decodes back to exactly the pixels drawn before handing it out. */
  private async finish(img: Rgba, job: ImageJob, checkpoint: () => void): Promise<GeneratedImage> {
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
    if (back.width !== img.width || back.height !== img.height || Buffer.compare(back.data, img.data) !== 0) {
      throw new EngineOutputInvalid("the built-in engine's PNG does not decode to the picture it drew");
    }
    return { bytes, mime: "image/png", width: img.width, height: img.height, revisedPrompt: job.prompt };
  }
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
