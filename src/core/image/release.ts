/**
 * A big upload's buffers given back the moment their owner is done with them, not at some
 * later garbage collection: a 118 MB JSON request reads about 900 body chunks and ten
 * image-sized buffers pass through the decode worker, and on a server whose heap is already a
 * few hundred MB the collector let about a body's worth of them pile up before it ran
 * (bench/big-upload.ts: the peak fell from about 1.9× to 0.9× the body with this and the
 * string-free base64 decode of http/jsonUploads). Detaching an ArrayBuffer (transferring it to
 * a zero-length one) frees its memory on the spot, and the allocator hands it to the next buffer.
 *
 * Only a view that spans its whole ArrayBuffer is released: a view into a larger buffer (a
 * Buffer pool slab, a slice of the input) shares that buffer with others. Every other view of a
 * released buffer becomes empty, so only the sole owner of the bytes may call this, once it has
 * copied out what it keeps. Small buffers are left to the collector (not worth a call).
 */
const RELEASE_FROM_BYTES = 64 * 1024;

export function releaseBytes(view: Uint8Array | undefined): void {
  if (!view) return;
  const buffer = view.buffer;
  if (!(buffer instanceof ArrayBuffer) || buffer.detached) return;
  if (view.byteOffset !== 0 || view.byteLength !== buffer.byteLength || buffer.byteLength < RELEASE_FROM_BYTES) return;
  buffer.transfer(0);
}
