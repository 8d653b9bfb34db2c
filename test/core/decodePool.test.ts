/**
 * The decode pool: real workers decode exactly what the calling thread would; scheduling
 * (bounded workers, the memory budget, FIFO, the time limit, crashes) is shown with scripted
 * workers so every step is deterministic.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { encode as encodeJpeg } from "jpeg-js";
import encodeWebp from "@jsquash/webp/encode.js";
import { decodeImage, encodePng, ImageDecodeError, type Rgba } from "../../src/core/image/codec";
import { decodeCost, DecodePool, type DecodeAnswer, type DecodeOrder } from "../../src/core/image/decodePool";
import { interlacedZerosBomb, pngWithRaw } from "../support/imageBombs";

function picture(width: number, height: number): Rgba {
  const data = new Uint8Array(width * height * 4);
  for (let i = 0; i < data.length; i += 4) data.set([(i * 7) & 255, (i >> 6) & 255, 90, 255 - ((i >> 2) & 127)], i);
  return { width, height, data };
}

describe("with real workers", () => {
  const pool = new DecodePool({ workers: 2, memoryBudgetBytes: 512 * 1024 * 1024, timeLimitMs: 30_000 });
  afterAll(() => pool.close());

  test("PNG, JPEG and WebP decode to the same pixels as on the calling thread; verify gives the size only", async () => {
    const src = picture(40, 30);
    const png = encodePng(src);
    const jpeg = new Uint8Array(encodeJpeg({ ...src, data: src.data }, 90).data);
    const webp = new Uint8Array(await encodeWebp({ data: new Uint8ClampedArray(src.data), width: 40, height: 30, colorSpace: "srgb" } as ImageData, { lossless: 1 }));
    for (const [bytes, mime] of [[png, "image/png"], [jpeg, "image/jpeg"], [webp, "image/webp"]] as const) {
      const off = await pool.decode(bytes, mime);
      const here = decodeImage(bytes, mime);
      expect([off.width, off.height]).toEqual([40, 30]);
      expect(Buffer.from(off.data).equals(Buffer.from(here.data))).toBe(true);
      expect(await pool.verify(bytes, mime)).toEqual({ width: 40, height: 30 });
    }
    expect(pool.reservedBytes).toBe(0);
  });

  test("the caller keeps its bytes, also when they are a view into Buffer's shared slab", async () => {
    const png = encodePng(picture(8, 8));
    const slab = Buffer.from(Buffer.from(png).toString("base64"), "base64"); // small: pooled
    const first = await pool.decode(slab, "image/png");
    expect(slab.byteLength).toBe(png.byteLength);
    const again = await pool.decode(slab, "image/png");
    expect(Buffer.from(again.data).equals(Buffer.from(first.data))).toBe(true);
  });

  test("the interlaced 1 GiB bomb is an ImageDecodeError from the worker, and the worker stays usable", async () => {
    const before = process.memoryUsage().rss;
    await expect(pool.verify(interlacedZerosBomb(), "image/png")).rejects.toThrow(/more than the 16504 bytes/);
    expect(process.memoryUsage().rss - before).toBeLessThan(100 * 1024 * 1024);
    expect(await pool.verify(encodePng(picture(3, 3)), "image/png")).toEqual({ width: 3, height: 3 });
  });

  test("a header the calling thread can refuse never reaches a worker", async () => {
    const huge = encodePng(picture(4, 4));
    new DataView(huge.buffer, huge.byteOffset).setUint32(16, 100_000);
    new DataView(huge.buffer, huge.byteOffset).setUint32(20, 100_000);
    const refused = pool.verify(huge, "image/png");
    expect(pool.queued).toBe(0);
    await expect(refused).rejects.toThrow(/megapixels/);
  });

  test("a decode over the time limit is stopped and refused; the pool goes on with a fresh worker", async () => {
    const slow = new DecodePool({ workers: 1, memoryBudgetBytes: 1 << 30, timeLimitMs: 1 });
    const big = encodePng(picture(1500, 1500));
    await expect(slow.decode(big, "image/png")).rejects.toThrow(/took longer than 0.001 s/);
    slow.options.timeLimitMs = 30_000;
    expect((await slow.decode(big, "image/png")).width).toBe(1500);
    slow.close();
  });
});

/** A worker whose answers the test sends by hand. */
class ScriptedWorker {
  static all: ScriptedWorker[] = [];
  orders: DecodeOrder[] = [];
  terminated = false;
  onmessage: ((e: MessageEvent<DecodeAnswer>) => void) | null = null;
  onerror: ((e: ErrorEvent) => void) | null = null;
  constructor() {
    ScriptedWorker.all.push(this);
  }
  postMessage(order: DecodeOrder) {
    this.orders.push(order);
  }
  answer(order: DecodeOrder, ok = true) {
    const data: DecodeAnswer = ok ? { id: order.id, ok, width: 1, height: 1 } : { id: order.id, ok, undecodable: true, message: "bad pixels" };
    this.onmessage?.({ data } as MessageEvent<DecodeAnswer>);
  }
  crash() {
    this.onerror?.({ message: "out of memory" } as ErrorEvent);
  }
  terminate() {
    this.terminated = true;
  }
  ref() {}
  unref() {}
}

function scriptedPool(workers: number, budget: number, timeLimitMs = 60_000) {
  ScriptedWorker.all = [];
  return new DecodePool({ workers, memoryBudgetBytes: budget, timeLimitMs }, () => new ScriptedWorker() as unknown as Worker & { ref(): void; unref(): void });
}

const running = () => ScriptedWorker.all.flatMap((w) => (w.terminated ? [] : w.orders.slice(-1).map((o) => ({ w, o }))));
const tick = () => new Promise((r) => setTimeout(r, 0));

describe("scheduling", () => {
  const png = (side: number) => encodePng(picture(side, side));
  const small = png(16);
  const medium = png(64);
  const cost = (b: Uint8Array) => decodeCost(b, "image/png", readSide(b));
  function readSide(b: Uint8Array) {
    const v = new DataView(b.buffer, b.byteOffset);
    return { width: v.getUint32(16), height: v.getUint32(20) };
  }

  test("decodeCost of a PNG: the input and its joined IDAT data, the inflated data (16-bit: twice as large), the RGBA", () => {
    expect(cost(medium)).toBe(2 * medium.byteLength + 64 * (1 + 64 * 4) + 64 * 64 * 4);
    const deep = pngWithRaw({ width: 10, height: 10, bitDepth: 16, colorType: 6 }, new Uint8Array(10 * (1 + 80)));
    expect(cost(deep)).toBe(2 * deep.byteLength + 10 * (1 + 80) + 10 * 10 * 4);
  });

  test("no more decodes run than there are workers; the rest wait in order", async () => {
    const pool = scriptedPool(2, 1 << 30);
    const results: string[] = [];
    const jobs = ["a", "b", "c", "d"].map((name) => pool.verify(small, "image/png").then(() => results.push(name)));
    expect(ScriptedWorker.all).toHaveLength(2);
    expect(pool.queued).toBe(2);
    const [w1, w2] = ScriptedWorker.all as [ScriptedWorker, ScriptedWorker];
    w2.answer(w2.orders[0]!); // b
    await tick();
    expect(w2.orders).toHaveLength(2); // c, the head of the queue, went to the worker that became free
    expect(pool.queued).toBe(1);
    w1.answer(w1.orders[0]!); // a
    await tick();
    expect(w1.orders).toHaveLength(2); // d
    w1.answer(w1.orders[1]!);
    w2.answer(w2.orders[1]!);
    await Promise.all(jobs);
    expect(results).toEqual(["b", "a", "d", "c"]);
    expect(pool.reservedBytes).toBe(0);
  });

  test("reservations never exceed the budget: the head waits for memory even with a worker free, and nothing overtakes it", async () => {
    const pool = scriptedPool(3, cost(medium) + cost(small));
    const order: string[] = [];
    const done = [
      pool.verify(medium, "image/png").then(() => order.push("medium 1")),
      pool.verify(medium, "image/png").then(() => order.push("medium 2")),
      pool.verify(small, "image/png").then(() => order.push("small")),
    ];
    // medium 1 runs; medium 2 does not fit beside it; small waits behind medium 2 (no overtaking).
    expect(running()).toHaveLength(1);
    expect(pool.reservedBytes).toBe(cost(medium));
    expect(pool.queued).toBe(2);
    const first = running()[0]!;
    first.w.answer(first.o);
    await tick();
    // medium 2 and small now fit together.
    expect(running().map((r) => r.o.cost).sort()).toEqual([cost(small), cost(medium)].sort());
    expect(pool.reservedBytes).toBeLessThanOrEqual(pool.options.memoryBudgetBytes);
    for (const r of running()) r.w.answer(r.o);
    await Promise.all(done);
    expect(order[0]).toBe("medium 1");
    expect(pool.reservedBytes).toBe(0);
  });

  test("a decode larger than the whole budget runs, alone", async () => {
    const pool = scriptedPool(2, cost(small));
    const big = pool.verify(medium, "image/png");
    const next = pool.verify(small, "image/png");
    expect(running()).toHaveLength(1);
    expect(pool.reservedBytes).toBe(cost(medium));
    running()[0]!.w.answer(running()[0]!.o);
    await big;
    await tick();
    expect(running()[0]!.o.cost).toBe(cost(small));
    running()[0]!.w.answer(running()[0]!.o);
    await next;
  });

  test("an undecodable answer is an ImageDecodeError; a crashed worker refuses its decode, is replaced, and frees its memory", async () => {
    const pool = scriptedPool(1, 1 << 30);
    const bad = pool.verify(small, "image/png");
    ScriptedWorker.all[0]!.answer(ScriptedWorker.all[0]!.orders[0]!, false);
    await expect(bad).rejects.toBeInstanceOf(ImageDecodeError);
    const crashing = pool.verify(small, "image/png");
    const queued = pool.verify(small, "image/png");
    ScriptedWorker.all[0]!.crash();
    await expect(crashing).rejects.toThrow(/the decoder failed: out of memory/);
    expect(ScriptedWorker.all[0]!.terminated).toBe(true);
    expect(ScriptedWorker.all).toHaveLength(2);
    const fresh = ScriptedWorker.all[1]!;
    expect(pool.reservedBytes).toBe(cost(small));
    fresh.answer(fresh.orders[0]!);
    await queued;
    expect(pool.reservedBytes).toBe(0);
  });

  test("the order carries a copy of the bytes, so the caller's buffer is never transferred away", () => {
    const pool = scriptedPool(1, 1 << 30);
    const refused = pool.verify(small, "image/png").catch((e: unknown) => e);
    const sent = ScriptedWorker.all[0]!.orders[0]!;
    expect(sent.bytes.buffer).not.toBe(small.buffer);
    expect(Buffer.from(sent.bytes).equals(Buffer.from(small))).toBe(true);
    pool.close();
    return expect(refused).resolves.toBeInstanceOf(ImageDecodeError);
  });
});
