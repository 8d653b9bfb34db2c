/**
 * Deadlines on the shared timer: each runs once, after its delay, unless cancelled; deadlines
 * of different lengths run in the order they fall due; a lane full of cancelled entries behind
 * a live one (a slow request) still runs the live ones.
 */
import { describe, expect, test } from "bun:test";
import { runAfter } from "../../src/core/timerQueue";
import { until } from "../support/until";

/** Deadlines of 60, 20, 40 and 0 ms, set in that order, each recording its length when it runs. */
function setOutOfOrder(ran: number[]): void {
  for (const ms of [60, 20, 40, 0]) runAfter(ms, () => ran.push(ms));
}

describe("runAfter", () => {
  test("runs once after its delay; a cancelled one never runs", async () => {
    const ran: string[] = [];
    const started = performance.now();
    let at = 0;
    runAfter(30, () => {
      ran.push("kept");
      at = performance.now() - started;
    });
    const cancelled = runAfter(10, () => ran.push("cancelled"));
    cancelled.cancel();
    cancelled.cancel();
    await Bun.sleep(80);
    expect(ran).toEqual(["kept"]);
    expect(at).toBeGreaterThanOrEqual(29);
  });

  test("different delays run in the order they fall due, not the order they were set", async () => {
    const ran: number[] = [];
    setOutOfOrder(ran);
    await Bun.sleep(120);
    expect(ran).toEqual([0, 20, 40, 60]);
  });

  test("when the event loop was late, deadlines of several lengths due at once still run in the order they fell due", async () => {
    const ran: number[] = [];
    setOutOfOrder(ran);
    // A stalled loop (a long synchronous task): all four are due when the timer first gets to run.
    const stalledUntil = performance.now() + 70;
    while (performance.now() < stalledUntil);
    await until(() => ran.length === 4, "the four deadlines");
    expect(ran).toEqual([0, 20, 40, 60]);
  });

  test("a callback may set a new deadline, which runs too", async () => {
    const ran: string[] = [];
    runAfter(5, () => {
      ran.push("first");
      runAfter(5, () => ran.push("second"));
    });
    // The second deadline counts from when the first callback ran, however late that was.
    await until(() => ran.length >= 2, "the second deadline");
    expect(ran).toEqual(["first", "second"]);
  });

  test("thousands cancelled behind a live entry of the same delay: the live ones still run, each once", async () => {
    let live = 0;
    runAfter(40, () => live++);
    for (let i = 0; i < 20_000; i++) runAfter(40, () => live += 1000).cancel();
    runAfter(40, () => live++);
    await Bun.sleep(120);
    expect(live).toBe(2);
  });
});

describe("a deadline past the timers' reach", () => {
  test("waits (no overflow to 1 ms, no spinning re-arm); a nearer one still runs", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      const ran: string[] = [];
      const far = runAfter(3_000_000_000, () => ran.push("far"));
      runAfter(20, () => ran.push("near"));
      await Bun.sleep(60);
      far.cancel();
      expect(ran).toEqual(["near"]);
      expect(warnings).toEqual([]);
    } finally {
      process.off("warning", onWarning);
    }
  });
});
