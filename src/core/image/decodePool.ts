/**
 * Full decodes run off the main thread, in a small pool of Bun Workers, so a big picture never
 * stalls /healthz, chat or other requests' I/O (a 25-megapixel PNG is about half a second of
 * pure JS and several hundred MB).
 *
 * The policy:
 * - At most `workers` decodes run at once; more wait in one FIFO queue (never refused: a decode
 *   is only asked for by a request that already holds a gate slot, so the queue is bounded by
 *   the gate, and a refusal after the charge would only mean a refund).
 * - Each decode reserves its worst-case memory (decodeCost: input, inflate and decoder buffers,
 *   output) from `memoryBudgetBytes` before it starts, and gives it back when it ends. The
 *   head of the queue waits until its reservation fits, so concurrent big decodes stay under
 *   the budget; a decode larger than the whole budget runs alone. No overtaking: a big decode
 *   is never starved by a stream of small ones.
 * - A decode that runs longer than `timeLimitMs` is stopped by terminating its worker (a JS
 *   decoder cannot be interrupted otherwise) and refused as undecodable; the worker is replaced.
 * - Bytes go in as a copy (the caller keeps its own), pixels come back transferred, not copied.
 * - Header checks (format, the 40-megapixel limit, PNG layout) run before queueing, on the
 *   calling thread: a bomb that its header already betrays never takes a worker.
 */
import type { ImageMime } from "../engine";
import { decodableDimensions, type Dimensions } from "./dimensions";
import { JPEG_MEMORY_LIMIT_BYTES } from "./jpeg";
import { pngInflatedSize, readPngLayout } from "./png";
import { ImageDecodeError, type Rgba } from "./rgba";
import { spawnEntrypointWorker, type BunWorker } from "../entrypointWorker";

export interface DecodeOrder {
  id: number;
  bytes: Uint8Array;
  mime: ImageMime;
  keepPixels: boolean;
  /** Prove the image data decodes without producing pixels where the format allows (PNG: verifyPngData). */
  dataOnly?: boolean;
  cost: number;
}

export type DecodeAnswer =
  | { id: number; ok: true; width: number; height: number; data?: Uint8Array }
  | { id: number; ok: false; undecodable: boolean; message: string };

export interface DecodePoolOptions {
  workers: number;
  memoryBudgetBytes: number;
  timeLimitMs: number;
}

const MiB = 1024 * 1024;

/**
 * One decoder per core but one (at least one, at most four): the event loop keeps a core of
 * its own. On two cores, bench/decode-responsiveness.ts measured /healthz p99 about 1 ms (max
 * about 5 ms) with one worker under four concurrent 25-megapixel decodes, and p99 about 7 ms
 * (max about 100 ms) with two, for 1.7 times the decode throughput.
 * 1 GiB holds two of the largest decodes at once (about 480 MB each: a 40-megapixel 16-bit
 * RGBA PNG, or a JPEG at jpeg-js's own limit). 30 s is far above the slowest legitimate decode
 * (about 1 s for a 40-megapixel PNG of any kind; progressive JPEGs are limited in scans).
 */
export const DEFAULT_DECODE_POOL: DecodePoolOptions = {
  workers: Math.max(1, Math.min(4, navigator.hardwareConcurrency - 1)),
  memoryBudgetBytes: 1024 * MiB,
  timeLimitMs: 30_000,
};

/**
 * Worst-case bytes a full decode holds at its peak, from what each decoder allocates (checked
 * against RSS growth). Throws ImageDecodeError for headers that cannot decode.
 */
export function decodeCost(bytes: Uint8Array, mime: ImageMime, dims: Dimensions): number {
  const pixels = dims.width * dims.height;
  switch (mime) {
    case "image/png": {
      const layout = readPngLayout(bytes);
      if (!layout) throw new ImageDecodeError("not a decodable PNG: its IHDR chunk is missing or malformed");
      // The joined IDAT data (at most the input), the inflated data (unfiltered in place), the RGBA.
      return 2 * bytes.byteLength + pngInflatedSize(layout) + pixels * 4;
    }
    case "image/jpeg":
      // Coefficient blocks (an Int32Array per 8x8 block and component), lines, output; jpeg-js
      // refuses past its own accounting, which undercounts object overhead by about half.
      return bytes.byteLength + Math.min(pixels * 28, JPEG_MEMORY_LIMIT_BYTES * 1.5);
    case "image/webp":
      // libwebp's RGBA in WASM memory and our copy out of it.
      return bytes.byteLength + pixels * 8;
  }
}

interface Job {
  order: Omit<DecodeOrder, "id">;
  resolve(answer: Extract<DecodeAnswer, { ok: true }>): void;
  reject(e: Error): void;
}

interface Slot {
  worker: BunWorker;
  job?: { id: number; job: Job; cost: number; timer: ReturnType<typeof setTimeout> };
}

export class DecodePool {
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private reserved = 0;
  private nextId = 1;

  constructor(
    readonly options: DecodePoolOptions,
    private readonly spawn: () => BunWorker = spawnDecodeWorker,
  ) {}

  /** Bytes reserved by running decodes (for tests and benches). */
  get reservedBytes(): number {
    return this.reserved;
  }

  get queued(): number {
    return this.queue.length;
  }

  /** Decodes to 8-bit RGBA in a worker. */
  async decode(bytes: Uint8Array, mime: ImageMime): Promise<Rgba> {
    const answer = await this.submit(bytes, mime, true);
    return { width: answer.width, height: answer.height, data: answer.data! };
  }

  /** Decodes in a worker and drops the pixels there; resolves to the decoded dimensions. */
  async verify(bytes: Uint8Array, mime: ImageMime): Promise<Dimensions> {
    const answer = await this.submit(bytes, mime, false);
    return { width: answer.width, height: answer.height };
  }

  /**
   * Proves in a worker that the image data decodes, producing pixels only where the check needs
   * them (PNG: verifyPngData; JPEG and WebP: a full decode whose pixels are dropped there).
   */
  async verifyData(bytes: Uint8Array, mime: ImageMime): Promise<void> {
    await this.submit(bytes, mime, false, true);
  }

  /** Stops every worker; queued and running decodes are refused. */
  close(): void {
    const closed = () => new ImageDecodeError("the decode pool was closed");
    for (const job of this.queue.splice(0)) job.reject(closed());
    for (const slot of this.slots.splice(0)) {
      if (slot.job) this.finish(slot, slot.job.id)?.reject(closed());
      slot.worker.terminate();
    }
  }

  private submit(bytes: Uint8Array, mime: ImageMime, keepPixels: boolean, dataOnly = false): Promise<Extract<DecodeAnswer, { ok: true }>> {
    const dims = decodableDimensions(bytes, mime);
    const cost = decodeCost(bytes, mime, dims);
    return new Promise((resolve, reject) => {
      // A copy with a buffer of its own, transferred to the worker: the caller keeps its bytes,
      // which may be a view into a larger buffer (a request body, Buffer's shared slab; note
      // that Buffer#slice would be such a view too).
      this.queue.push({ order: { bytes: new Uint8Array(bytes), mime, keepPixels, ...(dataOnly ? { dataOnly } : {}), cost }, resolve, reject });
      this.dispatch();
    });
  }

  private dispatch(): void {
    for (;;) {
      const head = this.queue[0];
      if (!head) return;
      const fits = this.reserved === 0 || this.reserved + head.order.cost <= this.options.memoryBudgetBytes;
      if (!fits) return;
      const slot = this.idleSlot();
      if (!slot) return;
      this.queue.shift();
      this.start(slot, head);
    }
  }

  private idleSlot(): Slot | undefined {
    const idle = this.slots.find((s) => !s.job);
    if (idle) return idle;
    if (this.slots.length >= this.options.workers) return undefined;
    const slot: Slot = { worker: this.spawn() };
    slot.worker.onmessage = (event: MessageEvent<DecodeAnswer>) => this.answered(slot, event.data);
    slot.worker.onerror = (event: ErrorEvent) => this.crashed(slot, event.message || "the decoder stopped");
    slot.worker.unref();
    this.slots.push(slot);
    return slot;
  }

  private start(slot: Slot, job: Job): void {
    const id = this.nextId++;
    const { cost } = job.order;
    this.reserved += cost;
    const timer = setTimeout(() => this.timedOut(slot, id), this.options.timeLimitMs);
    slot.job = { id, job, cost, timer };
    // While a decode runs, the worker keeps the process alive (a CLI awaiting it must not exit).
    slot.worker.ref();
    slot.worker.postMessage({ id, ...job.order } satisfies DecodeOrder, [job.order.bytes.buffer as ArrayBuffer]);
  }

  /** Ends the slot's current job and frees its reservation; returns the job if it was `id`. */
  private finish(slot: Slot, id: number): Job | undefined {
    const current = slot.job;
    if (!current || current.id !== id) return undefined;
    clearTimeout(current.timer);
    slot.job = undefined;
    this.reserved -= current.cost;
    slot.worker.unref();
    return current.job;
  }

  private answered(slot: Slot, answer: DecodeAnswer): void {
    const job = this.finish(slot, answer.id);
    if (job) {
      if (answer.ok) job.resolve(answer);
      else job.reject(answer.undecodable ? new ImageDecodeError(answer.message) : new Error(`decode worker: ${answer.message}`));
    }
    this.dispatch();
  }

  private timedOut(slot: Slot, id: number): void {
    const job = this.finish(slot, id);
    this.replace(slot);
    job?.reject(new ImageDecodeError(`decoding took longer than ${this.options.timeLimitMs / 1000} s and was stopped`));
    this.dispatch();
  }

  /** The worker died (out of memory, a bug): refuse its decode, start afresh on the next one. */
  private crashed(slot: Slot, message: string): void {
    const job = slot.job && this.finish(slot, slot.job.id);
    this.replace(slot);
    job?.reject(new ImageDecodeError(`the decoder failed: ${message}`));
    this.dispatch();
  }

  private replace(slot: Slot): void {
    slot.worker.terminate();
    const at = this.slots.indexOf(slot);
    if (at >= 0) this.slots.splice(at, 1);
  }
}

/** The decode worker, an entrypoint of the compiled binary of its own (core/entrypointWorker). */
function spawnDecodeWorker(): BunWorker {
  return spawnEntrypointWorker("core/image/decodeWorker.ts");
}

let shared: DecodePool | undefined;

/** The process-wide pool, created on first use (workers start lazily too). */
export function sharedDecodePool(): DecodePool {
  shared ??= new DecodePool(DEFAULT_DECODE_POOL);
  return shared;
}
