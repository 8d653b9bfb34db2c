/**
 * BatchWriter with a scripted timer: rows are written in bounded batches on the interval, at
 * once on flush and stop, kept for the next round when the write may succeed later, and a
 * failing batch never loses the rows after it nor throws at the caller; it is taken apart so
 * that only the rows that fail by themselves are dropped. Writes are async and never overlap.
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

function setup(opts: { maxBatch?: number; maxQueued?: number; atFaultMayBeRows?: (e: unknown) => boolean } = {}) {
  const timer = scriptedTimer();
  const written: number[][] = [];
  /** Every write tried, in order, whatever became of it. */
  const tried: number[][] = [];
  const dropped: { rows: number[]; error: string }[] = [];
  let fail: ((rows: number[]) => Error | null) | null = null;
  const writer = new BatchWriter<number>({
    write: (rows) => {
      tried.push([...rows]);
      const e = fail?.(rows);
      if (e) throw e;
      written.push([...rows]);
    },
    isRetryable: (e) => e instanceof Busy,
    atFaultMayBeRows: opts.atFaultMayBeRows,
    onDropped: (rows, error) => dropped.push({ rows: [...rows], error: String(error) }),
    intervalMs: 20,
    maxBatch: opts.maxBatch ?? 3,
    maxQueued: opts.maxQueued ?? 100,
    schedule: timer.schedule,
  });
  return { writer, timer, written, tried, dropped, failWith: (f: typeof fail) => (fail = f) };
}

/** A write of these rows fails (not retryably) while it holds any of `bad`, with that row's message. */
const refusing = (bad: Record<number, string>) => (rows: number[]) => {
  const row = rows.find((r) => r in bad);
  return row === undefined ? null : new Error(bad[row]);
};

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

  test("any other failure drops only the rows that fail by themselves: the batch is taken apart in halves, the rest lands in order, one report per distinct error, nothing throws", async () => {
    const { writer, written, tried, dropped, failWith } = setup({ maxBatch: 8 });
    failWith(refusing({ 3: "value refused", 6: "value refused", 8: "duplicate id" }));
    for (let i = 1; i <= 9; i++) writer.add(i);
    expect(await writer.flush()).toBe(true);
    expect(written.flat()).toEqual([1, 2, 4, 5, 7, 9]);
    expect(written.at(-1)).toEqual([9]);
    expect(dropped).toEqual([
      { rows: [3, 6], error: "Error: value refused" },
      { rows: [8], error: "Error: duplicate id" },
    ]);
    // The halves, in order: [1..8] → [1..4] → [1,2] ok, [3,4] → [3] ✗, [4] ok; [5..8] → [5,6] → [5] ok, [6] ✗; [7,8] → [7] ok, [8] ✗.
    expect(tried.slice(0, 13)).toEqual([[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4], [1, 2], [3, 4], [3], [4], [5, 6, 7, 8], [5, 6], [5], [6], [7, 8], [7], [8]]);
    expect(writer.pending()).toEqual([]);
  });

  test("while a batch is taken apart its rows stay queued, in order, ahead of later rows; one part per round, each at once; a conflict keeps the part for the next round", async () => {
    const { writer, timer, written, dropped, failWith } = setup({ maxBatch: 4 });
    failWith(refusing({ 2: "value refused" }));
    for (let i = 1; i <= 4; i++) writer.add(i);
    expect(() => timer.fire()).not.toThrow();
    await writer.idle();
    expect(written).toEqual([]);
    expect(writer.pending()).toEqual([1, 2, 3, 4]);
    expect(timer.delays).toEqual([20, 0]);
    writer.add(5);
    failWith(() => new Busy("locked"));
    timer.fire();
    await writer.idle();
    expect(writer.pending()).toEqual([1, 2, 3, 4, 5]);
    expect(timer.delays).toEqual([20, 0, 20]);
    failWith(refusing({ 2: "value refused" }));
    timer.fire(); // [1, 2] fails: its halves next
    await writer.idle();
    timer.fire(); // [1]
    await writer.idle();
    timer.fire(); // [2] fails alone: dropped, reported once the batch is done
    await writer.idle();
    expect(written).toEqual([[1]]);
    expect(writer.pending()).toEqual([3, 4, 5]);
    expect(dropped).toEqual([]);
    timer.fire(); // [3, 4]: the batch is done
    await writer.idle();
    expect(dropped).toEqual([{ rows: [2], error: "Error: value refused" }]);
    timer.fire(); // [5], a batch of its own
    await writer.idle();
    expect(written).toEqual([[1], [3, 4], [5]]);
    expect(timer.delays).toEqual([20, 0, 20, 0, 0, 0, 0]);
    expect(timer.armed).toBe(false);
  });

  test("bounded: a batch whose every row fails takes 2n − 1 writes and reports each row once", async () => {
    const { writer, tried, dropped, failWith } = setup({ maxBatch: 8 });
    failWith(() => new Error("no such table: requests"));
    for (let i = 1; i <= 8; i++) writer.add(i);
    expect(await writer.flush()).toBe(true);
    expect(tried.length).toBe(15);
    expect(dropped).toEqual([{ rows: [1, 2, 3, 4, 5, 6, 7, 8], error: "Error: no such table: requests" }]);
  });

  test("a failure no row can cause (atFaultMayBeRows false: the database unreachable) drops the batch whole, in one write", async () => {
    const unreachable = new Error("connection refused");
    const { writer, tried, written, dropped, failWith } = setup({ maxBatch: 3, atFaultMayBeRows: (e) => e !== unreachable });
    failWith(() => unreachable);
    for (let i = 1; i <= 4; i++) writer.add(i);
    expect(await writer.flush()).toBe(true);
    expect(tried).toEqual([[1, 2, 3], [4]]);
    expect(dropped).toEqual([{ rows: [1, 2, 3], error: "Error: connection refused" }, { rows: [4], error: "Error: connection refused" }]);
    failWith(null);
    writer.add(5);
    expect(await writer.flush()).toBe(true);
    expect(written).toEqual([[5]]);
  });

  test("past maxQueued while a batch is taken apart, its oldest rows are the ones dropped, and the rest of it is still taken apart", async () => {
    const { writer, timer, written, dropped, failWith } = setup({ maxBatch: 4, maxQueued: 5 });
    failWith(refusing({ 4: "value refused" }));
    for (let i = 1; i <= 4; i++) writer.add(i);
    timer.fire(); // [1..4] fails: parts [1, 2] and [3, 4]
    await writer.idle();
    for (let i = 5; i <= 7; i++) writer.add(i);
    expect(writer.pending()).toEqual([3, 4, 5, 6, 7]);
    expect(dropped.flatMap((d) => d.rows)).toEqual([1, 2]);
    expect(await writer.flush()).toBe(true);
    expect(written).toEqual([[3], [5, 6, 7]]);
    expect(dropped.slice(2)).toEqual([{ rows: [4], error: "Error: value refused" }]);
  });

  test("a stop while the store stays locked in the middle of taking a batch apart reports the rows found failing and the rest", async () => {
    const { writer, timer, dropped, failWith } = setup({ maxBatch: 4 });
    failWith(refusing({ 1: "value refused" }));
    for (let i = 1; i <= 4; i++) writer.add(i);
    timer.fire(); // [1..4] fails
    await writer.idle();
    timer.fire(); // [1, 2] fails
    await writer.idle();
    timer.fire(); // [1] fails alone
    await writer.idle();
    failWith(() => new Busy("locked"));
    expect(await writer.stop()).toBe(false);
    expect(dropped).toEqual([
      { rows: [1], error: "Error: value refused" },
      { rows: [2, 3, 4], error: "Error: the store was locked when the server stopped" },
    ]);
    expect(writer.pending()).toEqual([]);
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
