/**
 * How engines report progress (core/engine.ts ProgressReport): a report never throws into the
 * engine, and an engine never shows more partial images than the job asked for (at most
 * MAX_PARTIAL_IMAGES).
 */
import type { ImageJob, ProgressReport } from "../core/engine";
import { MAX_PARTIAL_IMAGES } from "../core/limits";

/** How many partial images this job wants (0 when it is not streamed; more than the limit gets the limit). */
export function partialsWanted(job: Pick<ImageJob, "partialImages">): number {
  const n = job.partialImages ?? 0;
  return Number.isInteger(n) && n > 0 ? Math.min(n, MAX_PARTIAL_IMAGES) : 0;
}

/** Hands a report to the job's listener; a listener that throws does not stop the engine. */
export function reportProgress(job: Pick<ImageJob, "onProgress">, report: ProgressReport): void {
  if (!job.onProgress) return;
  try {
    job.onProgress(report);
  } catch {
    // Progress is advisory: the generation goes on whatever the listener does.
  }
}

/**
 * When a polled engine (one that only sees a fraction go by) should show its next partial:
 * the k-th of n partials (0-based) once the fraction reaches (k + 1) / (n + 1), so the pictures
 * are spread over the run instead of all being early, noisy ones.
 */
export class PartialSchedule {
  private shown = 0;

  constructor(private readonly wanted: number) {}

  /** Whether a picture taken at this fraction would be shown (ask before decoding it). */
  isDue(fraction: number): boolean {
    return this.shown < this.wanted && fraction >= (this.shown + 1) / (this.wanted + 1);
  }

  /** Counts a partial that was shown. */
  taken(): void {
    this.shown++;
  }

  /** Whether more partials are wanted at all (a poll may skip the preview otherwise). */
  get wantsMore(): boolean {
    return this.shown < this.wanted;
  }
}
