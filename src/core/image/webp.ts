/**
 * WebP through libwebp compiled to WASM (@jsquash/webp, repackaged from Squoosh): lossy,
 * lossless and alpha; not animation (an animated WebP is refused as undecodable).
 *
 * The .wasm is imported `with { type: "file" }`, so `bun build --compile` embeds it in the
 * binary and readFileSync reads it back from the binary's own file system: nothing sits beside
 * the executable. We hand Emscripten an already compiled module through `instantiateWasm`,
 * which makes its start-up synchronous: `decode` exists as soon as the factory returns, so
 * decoding stays a plain synchronous call like the PNG and JPEG codecs.
 */
import { readFileSync } from "node:fs";
import webpDecoderFactory from "@jsquash/webp/codec/dec/webp_dec.js";
import wasmPath from "@jsquash/webp/codec/dec/webp_dec.wasm" with { type: "file" };
import { ImageDecodeError, type Rgba } from "./rgba";

interface WebpDecoder {
  decode(data: Uint8Array): { width: number; height: number; data: Uint8ClampedArray } | null;
}

const RESET_AFTER_PIXELS = 4_000_000;

let compiled: WebAssembly.Module | undefined;
let decoder: WebpDecoder | undefined;

function loadDecoder(): WebpDecoder {
  if (decoder) return decoder;
  compiled ??= new WebAssembly.Module(readFileSync(wasmPath));
  const module = compiled;
  // Emscripten fills in the object we pass (it is its `Module`); decode lands on it once the
  // runtime has started, which with a synchronous instantiateWasm is before the factory returns.
  const emscripten: Record<string, unknown> = {
    noInitialRun: true,
    instantiateWasm(imports: WebAssembly.Imports, receive: (instance: WebAssembly.Instance) => void) {
      const instance = new WebAssembly.Instance(module, imports);
      receive(instance);
      return instance.exports;
    },
  };
  void (webpDecoderFactory as unknown as (m: object) => Promise<unknown>)(emscripten).catch(() => undefined);
  if (typeof emscripten.decode !== "function") {
    throw new ImageDecodeError("the WebP decoder failed to start");
  }
  decoder = emscripten as unknown as WebpDecoder;
  return decoder;
}

export function decodeWebp(bytes: Uint8Array): Rgba {
  let result: ReturnType<WebpDecoder["decode"]>;
  try {
    result = loadDecoder().decode(bytes);
  } catch (e) {
    // A trap (e.g. out of WASM memory) can leave the instance's heap inconsistent: start afresh next time.
    decoder = undefined;
    if (e instanceof ImageDecodeError) throw e;
    throw new ImageDecodeError(`not a decodable WebP: ${(e as Error).message}`);
  }
  if (!result) throw new ImageDecodeError("not a decodable WebP (corrupt, truncated or animated)");
  const { width, height, data } = result;
  // WASM memory only grows: after a large picture, drop the instance so that memory can be
  // collected instead of staying resident for the life of the process. Re-instantiating the
  // compiled module costs about a millisecond.
  if (width * height > RESET_AFTER_PIXELS) decoder = undefined;
  return { width, height, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
}
