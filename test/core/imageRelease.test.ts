/**
 * core/image/release: a big buffer is given back at once (its ArrayBuffer detached) when the
 * view spans all of it, and never when others may share the buffer.
 */
import { describe, expect, test } from "bun:test";
import { releaseBytes } from "../../src/core/image/release";

describe("releaseBytes", () => {
  test("a view over a whole buffer of 64 KiB or more: the buffer is detached, every view of it empty", () => {
    const bytes = new Uint8Array(1024 * 1024).fill(7);
    const other = new Uint8Array(bytes.buffer, 10, 20);
    releaseBytes(bytes);
    expect(bytes.buffer.detached).toBe(true);
    expect(bytes.byteLength).toBe(0);
    expect(other.byteLength).toBe(0);
    // Twice is harmless.
    releaseBytes(bytes);
  });

  test("a view into a larger buffer, a small buffer, a shared buffer and nothing are left alone", () => {
    const big = new Uint8Array(1024 * 1024);
    const part = big.subarray(0, 512 * 1024);
    releaseBytes(part);
    expect(big.buffer.detached).toBe(false);
    expect(part.byteLength).toBe(512 * 1024);

    const slab = Buffer.from("a short string, from Buffer's shared pool");
    releaseBytes(slab);
    expect(slab.toString()).toBe("a short string, from Buffer's shared pool");

    const small = new Uint8Array(64 * 1024 - 1);
    releaseBytes(small);
    expect(small.byteLength).toBe(64 * 1024 - 1);

    const shared = new Uint8Array(new SharedArrayBuffer(1024 * 1024));
    releaseBytes(shared);
    expect(shared.byteLength).toBe(1024 * 1024);

    releaseBytes(undefined);
  });
});
