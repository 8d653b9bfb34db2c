import { describe, expect, test } from "bun:test";
import { BackgroundWork } from "../../src/core/background";

/** A promise settled from outside. */
function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

/** Whether `p` has settled after the microtasks queued so far have run. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  for (let i = 0; i < 5; i++) await Promise.resolve();
  return done;
}

describe("BackgroundWork", () => {
  test("idle resolves at once with nothing running", async () => {
    expect(await settled(new BackgroundWork().idle())).toBe(true);
  });

  test("counts work until it settles, whether it succeeds or fails", async () => {
    const bg = new BackgroundWork();
    const a = deferred<number>();
    const b = deferred<number>();
    expect(bg.track(a.promise)).toBe(a.promise);
    void bg.track(b.promise).catch(() => {});
    expect(bg.size).toBe(2);
    a.resolve(1);
    await a.promise;
    await Promise.resolve();
    expect(bg.size).toBe(1);
    b.reject(new Error("engine failed"));
    await b.promise.catch(() => {});
    await Promise.resolve();
    expect(bg.size).toBe(0);
  });

  test("begin/end count work whose owner reports its end: idle waits for the last end", async () => {
    const bg = new BackgroundWork();
    bg.begin();
    bg.begin();
    const idle = bg.idle();
    expect(bg.size).toBe(2);
    bg.end();
    expect(await settled(idle)).toBe(false);
    bg.end();
    expect(await settled(idle)).toBe(true);
    expect(bg.size).toBe(0);
  });

  test("idle waits for work tracked while it waits, and every waiter is woken", async () => {
    const bg = new BackgroundWork();
    const first = deferred();
    const second = deferred();
    void bg.track(first.promise);
    const idleA = bg.idle();
    const idleB = bg.idle();
    void bg.track(second.promise);
    first.resolve();
    expect(await settled(idleA)).toBe(false);
    second.resolve();
    expect(await settled(idleA)).toBe(true);
    expect(await settled(idleB)).toBe(true);
    // Idle again: a later wait does not see the earlier waiters' state.
    const third = deferred();
    void bg.track(third.promise);
    const idleC = bg.idle();
    expect(await settled(idleC)).toBe(false);
    third.resolve();
    expect(await settled(idleC)).toBe(true);
  });
});
