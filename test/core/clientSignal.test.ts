/**
 * The client's signal given as a getter: never read by work that ends quickly, read and
 * watched once work has run WATCH_AFTER_MS, and a client already gone by then aborts the work.
 */
import { describe, expect, test } from "bun:test";
import { WATCH_AFTER_MS, watchClient } from "../../src/core/clientSignal";
import { withDeadline } from "../../src/core/deadline";
import { until } from "../support/until";

describe("watchClient with a getter", () => {
  test("work that ends before WATCH_AFTER_MS never reads the signal", async () => {
    let reads = 0;
    const client = new AbortController();
    const run = withDeadline(5_000, async () => "done", () => (reads++, client.signal));
    expect(await run.result).toBe("done");
    await run.settled;
    await Bun.sleep(WATCH_AFTER_MS * 3);
    expect(reads).toBe(0);
  });

  test("longer work reads it once and is aborted when the client leaves", async () => {
    let reads = 0;
    const client = new AbortController();
    const run = withDeadline(
      5_000,
      (scope) => new Promise<string>((_, reject) => scope.signal.addEventListener("abort", () => reject(new Error("aborted by the client")))),
      () => (reads++, client.signal),
    );
    // Read on the ticker's second tick (WATCH_AFTER_MS to twice that): waited for with a bound, not a fixed sleep.
    await until(() => reads > 0, "the signal to be read");
    expect(reads).toBe(1);
    client.abort();
    expect(await run.result.catch((e: Error) => e.message)).toBe("aborted by the client");
  });

  test("a client already gone when the signal is first read aborts at once", async () => {
    const client = new AbortController();
    client.abort(new Error("gone"));
    const reasons: unknown[] = [];
    const stop = watchClient(() => client.signal, (reason) => reasons.push(reason));
    await until(() => reasons.length > 0, "the abort to be seen");
    expect(reasons).toEqual([client.signal.reason]);
    stop();
  });
});
