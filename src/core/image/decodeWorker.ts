/**
 * The decode pool's worker: decodes one image per message with the same bounded decoders the
 * main thread has, and answers with the pixels (transferred, not copied) or only the
 * dimensions. A separate entrypoint of the compiled binary (see package.json "build").
 */
import { decodeImage, ImageDecodeError } from "./codec";
import { verifyPngData } from "./png";
import { releaseBytes } from "./release";
import { decodableDimensions } from "./dimensions";
import type { DecodeAnswer, DecodeOrder } from "./decodePool";

declare const self: Worker;

/**
 * After a decode this large, collect at once: what the decoder allocated (up to hundreds of MB)
 * would otherwise outlive the pool's reservation until allocations in a later decode set off a
 * collection. Measured under four concurrent 25-megapixel decodes: server peak RSS 272 MiB with
 * it, 623 MiB without, at the same throughput. The input (this worker's own copy) and a PNG's
 * inflated data are released at once after every order, whatever its size (core/image/release):
 * ten 9 MB uploads checked one after the other could otherwise pile up about 190 MB here.
 */
const COLLECT_AFTER_BYTES = 64 * 1024 * 1024;

self.onmessage = (event: MessageEvent<DecodeOrder>) => {
  const { bytes, cost } = event.data;
  const { answer, transfer } = carryOut(event.data);
  releaseBytes(bytes);
  self.postMessage(answer, transfer);
  if (cost >= COLLECT_AFTER_BYTES) Bun.gc(true);
};

function carryOut({ id, bytes, mime, keepPixels, dataOnly }: DecodeOrder): { answer: DecodeAnswer; transfer: ArrayBuffer[] } {
  try {
    if (dataOnly && mime === "image/png") {
      verifyPngData(bytes);
      const { width, height } = decodableDimensions(bytes, mime);
      return { answer: { id, ok: true, width, height }, transfer: [] };
    }
    const img = decodeImage(bytes, mime);
    if (!keepPixels) return { answer: { id, ok: true, width: img.width, height: img.height }, transfer: [] };
    // Transfer needs a buffer of its own: a view into a shared slab would detach the slab.
    const own = img.data.byteOffset === 0 && img.data.byteLength === img.data.buffer.byteLength ? img.data : new Uint8Array(img.data);
    return { answer: { id, ok: true, width: img.width, height: img.height, data: own }, transfer: [own.buffer as ArrayBuffer] };
  } catch (e) {
    return { answer: { id, ok: false, undecodable: e instanceof ImageDecodeError, message: (e as Error).message }, transfer: [] };
  }
}
