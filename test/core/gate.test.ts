/**
 * The concurrency gate on its own: queue timeouts run on bun's fake timers, waited time on a
 * fake clock, so nothing here sleeps. The invariants: never more than the global and per-user
 * permits, FIFO admission from the queue, clear refusals with a retry hint, and a slot that
 * comes back exactly once (release, timeout or abort).
 */
import { afterEach, beforeEach, describe, expect, jest, test } from "bun:test";
import fc from "fast-check";
import { GateRejected, LocalGate, type GateLimits, type Permit } from "../../src/core/gate";
import { fakeClock } from "../support/fakeClock";

const LIMITS: GateLimits = { subject: "image requests", global: 2, perUser: 1, queueSize: 4, queueTimeoutMs: 1000 };

beforeEach(() => jest.useFakeTimers());
afterEach(() => jest.useRealTimers());

function setup(limits: Partial<GateLimits> = {}) {
  const clock = fakeClock();
  const gate = new LocalGate({ ...LIMITS, ...limits }, clock.now);
  return { gate, clock };
}

/** Lets promise callbacks run (admission from the queue resolves inside release()). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await Promise.resolve();
}

/** An admission whose outcome the test can read without awaiting it. */
function track(p: Promise<Permit>) {
  const t = { permit: undefined as Permit | undefined, error: undefined as GateRejected | undefined };
  p.then(
    (permit) => (t.permit = permit),
    (e: GateRejected) => (t.error = e),
  );
  return t;
}

async function rejection(p: Promise<Permit>): Promise<GateRejected> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(GateRejected);
  return e as GateRejected;
}

describe("limits", () => {
  test("admitNow: a permit without a promise while the request may run at once, else null; the same counts as admit", async () => {
    const { gate } = setup();
    const a = gate.admitNow(1);
    expect(a).not.toBeNull();
    expect(gate.admitNow(1)).toBeNull(); // user 1's own limit
    const b = gate.admitNow(2);
    expect(b).not.toBeNull();
    expect(gate.admitNow(3)).toBeNull(); // the global limit
    expect(gate.stats()).toEqual({ running: 2, queued: 0 });
    // A waiter queued by admit() is served first when a slot comes back: admitNow takes none then.
    const waiting = track(gate.admit(3));
    a!.release();
    a!.release(); // idempotent
    await settle();
    expect(waiting.permit).toBeDefined();
    expect(gate.admitNow(4)).toBeNull();
    b!.release();
    waiting.permit!.release();
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
    expect(gate.admitNow(4)).not.toBeNull();
  });

  test("admits at once up to the global limit; the next one waits", async () => {
    const { gate } = setup({ global: 2, perUser: 5 });
    const a = await gate.admit(1);
    const b = await gate.admit(2);
    expect(a.waitedMs).toBe(0);
    expect(b.waitedMs).toBe(0);
    const c = track(gate.admit(3));
    await settle();
    expect(c.permit).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 2, queued: 1 });
    a.release();
    await settle();
    expect(c.permit).toBeDefined();
    expect(gate.stats()).toEqual({ running: 2, queued: 0 });
    b.release();
    c.permit!.release();
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("a user at the per-user limit waits, and gets in when one of their own requests ends", async () => {
    const { gate } = setup({ global: 5, perUser: 2 });
    const first = await gate.admit(1);
    await gate.admit(1);
    const third = track(gate.admit(1));
    await settle();
    expect(third.permit).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 2, queued: 1 });
    first.release();
    await settle();
    expect(third.permit).toBeDefined();
    expect(gate.stats().running).toBe(2);
  });

  test("a waiter blocked only by its own per-user limit does not hold up another user's waiter", async () => {
    const { gate } = setup({ global: 2, perUser: 1 });
    await gate.admit(1);
    const two = await gate.admit(2);
    const oneAgain = track(gate.admit(1)); // blocked by its own limit (and the global one)
    const three = track(gate.admit(3)); // blocked by the global limit only
    await settle();
    expect(gate.stats()).toEqual({ running: 2, queued: 2 });
    two.release();
    await settle();
    expect(three.permit).toBeDefined();
    expect(oneAgain.permit).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 2, queued: 1 });
  });

  // A waiter blocked by its own per-user limit must not hold up another user's request while a
  // global slot is free.
  test("a newcomer with a free global slot is not queued behind another user's per-user wait", async () => {
    const { gate } = setup({ global: 2, perUser: 1 });
    await gate.admit(1);
    const blocked = track(gate.admit(1)); // user 1 waits for their own limit; 1 of 2 global slots is used
    const other = track(gate.admit(2));
    await settle();
    expect(other.permit).toBeDefined();
    expect(gate.stats()).toEqual({ running: 2, queued: 1 });
    expect(blocked.permit).toBeUndefined();
  });

  test("property: over any sequence of admissions, releases and aborts, the limits hold and every slot comes back", async () => {
    const op = fc.oneof(
      fc.record({ t: fc.constant("admit" as const), user: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ t: fc.constant("release" as const), k: fc.nat() }),
      fc.record({ t: fc.constant("releaseTwice" as const), k: fc.nat() }),
      fc.record({ t: fc.constant("abort" as const), k: fc.nat() }),
    );
    const limits = fc.record({
      global: fc.integer({ min: 1, max: 4 }),
      perUser: fc.integer({ min: 1, max: 3 }),
      queueSize: fc.integer({ min: 0, max: 5 }),
    });
    await fc.assert(
      fc.asyncProperty(limits, fc.array(op, { maxLength: 40 }), async (l, ops) => {
        const gate = new LocalGate({ ...l, subject: "image requests", queueTimeoutMs: 60_000 }, () => 0);
        const held: { user: number; permit: Permit }[] = [];
        const waiting: { user: number; seq: number; abort: AbortController }[] = [];
        const admittedOrder: { user: number; seq: number }[] = [];
        const refusals: string[] = [];
        let seq = 0;
        const check = () => {
          expect(refusals.filter((r) => r !== "ok")).toEqual([]);
          const perUser = new Map<number, number>();
          for (const h of held) perUser.set(h.user, (perUser.get(h.user) ?? 0) + 1);
          expect(held.length).toBeLessThanOrEqual(l.global);
          for (const n of perUser.values()) expect(n).toBeLessThanOrEqual(l.perUser);
          expect(gate.stats()).toEqual({ running: held.length, queued: waiting.length });
          expect(waiting.length).toBeLessThanOrEqual(l.queueSize);
        };
        const admit = (user: number) => {
          const s = ++seq;
          const abort = new AbortController();
          const entry = { user, seq: s, abort };
          const queuedBefore = gate.stats().queued;
          gate.admit(user, abort.signal).then(
            (permit) => {
              const i = waiting.indexOf(entry);
              if (i >= 0) waiting.splice(i, 1);
              held.push({ user, permit });
              admittedOrder.push({ user, seq: s });
            },
            (e: GateRejected) => {
              const i = waiting.indexOf(entry);
              if (i >= 0) waiting.splice(i, 1);
              // Refused at once (never queued) only when full; a queued one leaves only by its abort.
              refusals.push(i >= 0 ? (e.reason === "aborted" ? "ok" : `queued, then ${e.reason}`) : e.reason === "queue_full" ? "ok" : `at once: ${e.reason}`);
            },
          );
          if (gate.stats().queued > queuedBefore) waiting.push(entry);
        };
        for (const o of ops) {
          if (o.t === "admit") admit(o.user);
          else if (o.t === "abort") waiting[o.k % Math.max(1, waiting.length)]?.abort.abort();
          else {
            const h = held.length ? held.splice(o.k % held.length, 1)[0]! : undefined;
            h?.permit.release();
            if (o.t === "releaseTwice") h?.permit.release();
          }
          await settle();
          check();
        }
        // Drain: releasing everything admits every waiter, and then the gate is empty.
        while (held.length) {
          held.shift()!.permit.release();
          await settle();
          check();
        }
        expect(waiting).toEqual([]);
        expect(gate.stats()).toEqual({ running: 0, queued: 0 });
        // Each user's requests were admitted in the order they asked.
        for (const user of [1, 2, 3]) {
          const mine = admittedOrder.filter((a) => a.user === user).map((a) => a.seq);
          expect(mine).toEqual([...mine].sort((a, b) => a - b));
        }
      }),
      { numRuns: 300, seed: Number(process.env.FC_SEED ?? 20_260_110) },
    );
  });
});

describe("the queue", () => {
  test("waiters are admitted in arrival order (FIFO) and report how long they waited", async () => {
    const { gate, clock } = setup({ global: 1, perUser: 5, queueSize: 10 });
    let current = await gate.admit(1);
    const order: number[] = [];
    const waiters = [2, 3, 4, 5].map((user) => gate.admit(user).then((p) => (order.push(user), p)));
    await settle();
    const waited: number[] = [];
    for (const w of waiters) {
      clock.advance(100);
      current.release();
      current = await w;
      waited.push(current.waitedMs);
    }
    expect(order).toEqual([2, 3, 4, 5]);
    expect(waited).toEqual([100, 200, 300, 400]);
    current.release();
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("a full queue refuses at once with a retry hint and names the limit in the way", async () => {
    const { gate } = setup({ global: 1, perUser: 1, queueSize: 2 });
    await gate.admit(1);
    track(gate.admit(2));
    track(gate.admit(3));
    const global = await rejection(gate.admit(4));
    expect(global.reason).toBe("queue_full");
    expect(global.limit).toBe("global");
    expect(global.retryAfterMs).toBeGreaterThan(0);
    expect(global.message).toContain("server-wide limit of 1");
    expect(global.message).toContain("wait queue (2) is full");
    const perUser = await rejection(gate.admit(1));
    expect(perUser.limit).toBe("per_user");
    expect(perUser.message).toContain("per-user limit of 1");
    expect(gate.stats()).toEqual({ running: 1, queued: 2 });
  });

  test("queue size 0 or a zero queue timeout: refused at once, never queued", async () => {
    for (const limits of [{ queueSize: 0 }, { queueTimeoutMs: 0 }]) {
      const { gate } = setup({ global: 1, ...limits });
      await gate.admit(1);
      expect((await rejection(gate.admit(2))).reason).toBe("queue_full");
      expect(gate.stats()).toEqual({ running: 1, queued: 0 });
    }
  });

  test("a waiter that gives up at the queue timeout leaves no listener on the client's signal", async () => {
    const { gate } = setup({ global: 1, queueTimeoutMs: 1000 });
    const first = await gate.admit(1);
    const client = new AbortController();
    // Counts the listeners the gate adds to the signal and takes off again.
    let listening = 0;
    const add = client.signal.addEventListener.bind(client.signal);
    const remove = client.signal.removeEventListener.bind(client.signal);
    client.signal.addEventListener = (...args: Parameters<AbortSignal["addEventListener"]>) => (listening++, add(...args));
    client.signal.removeEventListener = (...args: Parameters<AbortSignal["removeEventListener"]>) => (listening--, remove(...args));
    const late = track(gate.admit(2, client.signal));
    await settle();
    expect(listening).toBe(1);
    jest.advanceTimersByTime(1000);
    await settle();
    expect(late.error?.reason).toBe("queue_timeout");
    expect(listening).toBe(0);
    first.release();
  });

  test("a waiter gives up at the queue timeout, leaves the queue, and never takes a slot afterwards", async () => {
    const { gate } = setup({ global: 1, queueTimeoutMs: 1000 });
    const first = await gate.admit(1);
    const late = track(gate.admit(2));
    jest.advanceTimersByTime(999);
    await settle();
    expect(late.error).toBeUndefined();
    expect(gate.stats().queued).toBe(1);
    jest.advanceTimersByTime(1);
    await settle();
    expect(late.error?.reason).toBe("queue_timeout");
    expect(late.error?.limit).toBe("global");
    expect(late.error?.retryAfterMs).toBeGreaterThan(0);
    expect(late.error?.message).toContain("waited 1000 ms");
    expect(gate.stats()).toEqual({ running: 1, queued: 0 });
    first.release();
    await settle();
    expect(late.permit).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("a waiter admitted in time has its timeout cancelled", async () => {
    const { gate } = setup({ global: 1, queueTimeoutMs: 1000 });
    const first = await gate.admit(1);
    const next = track(gate.admit(2));
    jest.advanceTimersByTime(500);
    first.release();
    await settle();
    jest.advanceTimersByTime(5000);
    await settle();
    expect(next.permit).toBeDefined();
    expect(next.error).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 1, queued: 0 });
    expect(jest.getTimerCount()).toBe(0);
  });

  test("a client that goes away while queued leaves at once; its place goes to the next waiter", async () => {
    const { gate } = setup({ global: 1, perUser: 5, queueSize: 2 });
    const first = await gate.admit(1);
    const abort = new AbortController();
    const gone = track(gate.admit(2, abort.signal));
    const next = track(gate.admit(3));
    await settle();
    expect(gate.stats().queued).toBe(2);
    expect(jest.getTimerCount()).toBe(2);
    abort.abort();
    await settle();
    expect(gone.error?.reason).toBe("aborted");
    expect(gate.stats()).toEqual({ running: 1, queued: 1 });
    expect(jest.getTimerCount()).toBe(1); // its queue timeout went with it
    // The freed queue place takes a new waiter; the running slot goes to the next in line.
    track(gate.admit(4));
    expect(gate.stats().queued).toBe(2);
    first.release();
    await settle();
    expect(next.permit).toBeDefined();
    expect(gone.permit).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 1, queued: 1 });
  });

  test("an abort after admission changes nothing (the permit is the caller's to release)", async () => {
    const { gate } = setup({ global: 1 });
    const abort = new AbortController();
    const p = await gate.admit(1, abort.signal);
    abort.abort();
    expect(gate.stats().running).toBe(1);
    p.release();
    expect(gate.stats().running).toBe(0);
  });

  // A signal that is already aborted never fires "abort" again: it must be checked up front.
  test("a client already gone when it reaches a full gate is refused at once as aborted", async () => {
    const { gate } = setup({ global: 1 });
    await gate.admit(1);
    const abort = new AbortController();
    abort.abort();
    const gone = track(gate.admit(2, abort.signal));
    await settle();
    expect(gone.error?.reason).toBe("aborted");
    expect(gate.stats().queued).toBe(0);
  });
});

describe("release", () => {
  test("releasing twice frees one slot, not two", async () => {
    const { gate } = setup({ global: 1, perUser: 5, queueSize: 5 });
    const first = await gate.admit(1);
    const second = track(gate.admit(2));
    const third = track(gate.admit(3));
    first.release();
    first.release();
    await settle();
    expect(second.permit).toBeDefined();
    expect(third.permit).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 1, queued: 1 });
    second.permit!.release();
    second.permit!.release();
    await settle();
    expect(third.permit).toBeDefined();
    third.permit!.release();
    third.permit!.release();
    expect(gate.stats()).toEqual({ running: 0, queued: 0 });
  });

  test("a double release does not lend a user a second per-user slot", async () => {
    const { gate } = setup({ global: 5, perUser: 1 });
    const a = await gate.admit(1);
    const b = track(gate.admit(1));
    const c = track(gate.admit(1));
    a.release();
    a.release();
    await settle();
    expect(b.permit).toBeDefined();
    expect(c.permit).toBeUndefined();
    expect(gate.stats()).toEqual({ running: 1, queued: 1 });
  });
});
