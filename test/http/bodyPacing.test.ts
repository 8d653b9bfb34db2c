/**
 * The body guard's pacing timer (http/body guardBody) when the deadline is far off: at a low
 * [server] min_body_bytes_per_s, the deadline of a large body that has mostly arrived lies
 * weeks ahead, past what setTimeout holds; the read must wait for the rest, not end in 408.
 */
import { expect, test } from "bun:test";
import { BodyBudget, guardBody, type BodyRules } from "../../src/http/body";
import { MAX_TIMER_MS } from "../../src/core/timerDelay";

test("a body whose pacing deadline is past the timers' reach is read whole, not refused as too slow", async () => {
  // 3 MB at 1 B/s: the deadline is 3e9 ms after the first read, over MAX_TIMER_MS.
  const first = new Uint8Array(3_000_000);
  const rules: BodyRules = { maxBytes: 4_000_000, graceMs: 100, minBytesPerSecond: 1 };
  expect((first.byteLength / rules.minBytesPerSecond) * 1000).toBeGreaterThan(MAX_TIMER_MS);
  const source = new ReadableStream<Uint8Array>({
    async start(controller) {
      controller.enqueue(first);
      // The rest comes 50 ms later: an overflowed timer (fired after 1 ms) ends the read first.
      await Bun.sleep(50);
      controller.enqueue(new Uint8Array(10));
      controller.close();
    },
  });
  const request = new Request("http://x/v1/images/edits", { method: "POST", body: source, duplex: "half" } as RequestInit);
  const guarded = guardBody(request, rules, new BodyBudget(rules.maxBytes, rules.maxBytes));
  expect((await guarded.arrayBuffer()).byteLength).toBe(3_000_010);
});
