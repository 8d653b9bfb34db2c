/**
 * BatchWriter with a scripted timer: rows are written in bounded batches on the interval, at
 * once on flush and stop, kept for the next round when the write may succeed later, and a
 * failing batch never loses the rows after it nor throws at the caller. Writes are async and
 * never overlap.
 */
import { describe, expect, test } from "bun:test";
import { BatchWriter } from "../../src/core/batchWriter";

class Busy extends Error {}

/** A one-shot timer the test fires by hand, recording the delay each time it was armed. */
function scriptedTimer() {
  let pending: (() => void) | null = null;
  const delays: number[] = [];
  return {
    schedule: (fn: () => void, ms: number) => {
      if (pending) throw new Error("armed twice");
      pending = fn;
      delays.push(ms);
      return () => {
        pending = null;
      };
    },
    get armed() {
      return pending !== null;
    },
    delays,
    /** Runs the armed round; the test awaits writer.idle() to see its write land. */
    fire() {
      const fn = pending;
      if (!fn) throw new Error("no timer armed");
      pending = null;
      fn();
    },
  };
}

function setup(opts: { maxBatch?: number; maxQueued?: number } = {}) {
  const timer = scriptedTimer();
  const written: number[][] = [];
  const dropped: { rows: number[]; error: string }[] = [];
  let fail: ((rows: number[]) => Error | null) | null = null;
  const writer = new BatchWriter<number>({
    write: (rows) => {
      const e = fail?.(rows);
      if (e) throw e;
      written.push([...rows]);
    },
    isRetryable: (e) => e instanceof Busy,
    onDropped: (rows, error) => dropped.push({ rows: [...rows], error: String(error) }),
    intervalMs: 20,
    maxBatch: opts.maxBatch ?? 3,
    maxQueued: opts.maxQueued ?? 100,
    schedule: timer.schedule,
  });
  return { writer, timer, written, dropped, failWith: (f: typeof fail) => (fail = f) };
}

describe("BatchWriter", () => {
  test("rows wait for the interval, then go in one write; nothing is armed while the queue is empty", async () => {
    const { writer, timer, written } = setup();
    expect(timer.armed).toBe(false);
    writer.add(1);
    writer.add(2);
    expect(written).toEqual([]);
    expect(writer.pending()).toEqual([1, 2]);
    expect(timer.delays).toEqual([20]);
    timer.fire();
    await writer.idle();
    expect(written).toEqual([[1, 2]]);
    expect(writer.pending()).toEqual([]);
    expect(timer.armed).toBe(false);
  });

  test("a batch is bounded: a backlog is written maxBatch rows per round, the next round at once", async () => {
    const { writer, timer, written } = setup({ maxBatch: 3 });
    for (let i = 1; i <= 7; i++) writer.add(i);
    timer.fire();
    await writer.idle();
    expect(written).toEqual([[1, 2, 3]]);
    expect(timer.delays).toEqual([20, 0]);
    timer.fire();
    await writer.idle();
    timer.fire();
    await writer.idle();
    expect(written).toEqual([[1, 2, 3], [4, 5, 6], [7]]);
    expect(timer.armed).toBe(false);
  });

  test("flush writes everything now, in bounded batches, and disarms the timer", async () => {
    const { writer, timer, written } = setup({ maxBatch: 2 });
    for (let i = 1; i <= 5; i++) writer.add(i);
    expect(await writer.flush()).toBe(true);
    expect(written).toEqual([[1, 2], [3, 4], [5]]);
    expect(timer.armed).toBe(false);
  });

  test("stop writes what is queued, and a row added after the stop is written at once", async () => {
    const { writer, timer, written } = setup();
    writer.add(1);
    expect(await writer.stop()).toBe(true);
    expect(written).toEqual([[1]]);
    writer.add(2);
    await writer.idle();
    expect(written).toEqual([[1], [2]]);
    expect(timer.armed).toBe(false);
  });

  test("a retryable failure keeps the rows, in order, for the next round; they land once it passes", async () => {
    const { writer, timer, written, dropped, failWith } = setup();
    failWith(() => new Busy("locked"));
    writer.add(1);
    writer.add(2);
    timer.fire();
    await writer.idle();
    expect(written).toEqual([]);
    expect(timer.delays).toEqual([20, 20]);
    writer.add(3);
    expect(await writer.flush()).toBe(false);
    expect(writer.pending()).toEqual([1, 2, 3]);
    failWith(null);
    timer.fire();
    await writer.idle();
    expect(written).toEqual([[1, 2, 3]]);
    expect(dropped).toEqual([]);
  });

  test("any other failure drops only that batch, reports it, never throws, and the next batch is written", async () => {
    const { writer, timer, written, dropped, failWith } = setup({ maxBatch: 2 });
    failWith((rows) => (rows.includes(2) ? new Error("constraint failed") : null));
    writer.add(1);
    writer.add(2);
    writer.add(3);
    expect(() => timer.fire()).not.toThrow();
    await writer.idle();
    expect(dropped).toEqual([{ rows: [1, 2], error: "Error: constraint failed" }]);
    timer.fire();
    await writer.idle();
    expect(written).toEqual([[3]]);
  });

  test("the queue is bounded: past maxQueued the oldest rows are dropped and reported", async () => {
    const { writer, dropped, failWith } = setup({ maxQueued: 3 });
    failWith(() => new Busy("locked"));
    for (let i = 1; i <= 5; i++) writer.add(i);
    expect(writer.pending()).toEqual([3, 4, 5]);
    expect(dropped.map((d) => d.rows)).toEqual([[1], [2]]);
  });

  test("a stop while the store stays locked reports the rows it could not write instead of keeping them", async () => {
    const { writer, dropped, failWith, timer } = setup();
    failWith(() => new Busy("locked"));
    writer.add(1);
    expect(await writer.stop()).toBe(false);
    expect(dropped.map((d) => d.rows)).toEqual([[1]]);
    expect(writer.pending()).toEqual([]);
    expect(timer.armed).toBe(false);
  });

  test("one write in flight at a time: a flush during a slow write waits for it, and rows land in the order they came", async () => {
    const timer = scriptedTimer();
    const started: number[][] = [];
    const landed: number[][] = [];
    const gates: (() => void)[] = [];
    const writer = new BatchWriter<number>({
      write: async (rows) => {
        started.push([...rows]);
        await new Promise<void>((resolve) => gates.push(resolve));
        landed.push([...rows]);
      },
      isRetryable: () => false,
      onDropped: () => {},
      intervalMs: 20,
      maxBatch: 2,
      maxQueued: 100,
      schedule: timer.schedule,
    });
    writer.add(1);
    writer.add(2);
    timer.fire();
    writer.add(3);
    const flushed = writer.flush();
    await Bun.sleep(1);
    // The first batch is still being written: the flush has not started a second write.
    expect(started).toEqual([[1, 2]]);
    gates.shift()!();
    await Bun.sleep(1);
    expect(started).toEqual([[1, 2], [3]]);
    gates.shift()!();
    expect(await flushed).toBe(true);
    await writer.idle();
    expect(landed).toEqual([[1, 2], [3]]);
    expect(writer.pending()).toEqual([]);
  });
});
