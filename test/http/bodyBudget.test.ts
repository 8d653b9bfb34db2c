/**
 * The body budget (issue 15): a declared body that does not fit waits its turn instead of a
 * 429 at once: in arrival order (nothing overtakes a big body), at most the queue timeout, and
 * a client that goes away leaves the queue. The in-flight bytes never pass the budget.
 */
import { describe, expect, test } from "bun:test";
import { BodyBudget } from "../../src/http/body";
import { ApiError } from "../../src/http/errors";
import { attachMeta } from "../../src/http/requestMeta";

const MiB = 1024 * 1024;

function request(): Request {
  const r = new Request("http://x/v1/images/generations", { method: "POST" });
  attachMeta(r);
  return r;
}

/** admit() as a settled-state probe: "admitted", the error's status and code, or "waiting". */
function track(p: Promise<void>) {
  const state = { now: "waiting" as string };
  p.then(
    () => (state.now = "admitted"),
    (e) => (state.now = e instanceof ApiError ? `${e.status} ${e.errorCode}` : String(e)),
  );
  return state;
}

const tick = () => Bun.sleep(5);

describe("the body budget queue", () => {
  test("bodies that do not fit wait and are admitted in arrival order as room is released; the budget is never passed", async () => {
    const budget = new BodyBudget(200 * MiB, 300 * MiB, 60_000);
    const [a, b, c, d] = [request(), request(), request(), request()];
    await budget.admit(a, 118 * MiB);
    await budget.admit(b, 118 * MiB);
    const third = track(budget.admit(c, 118 * MiB));
    // A small body behind it does not overtake it, though it would fit.
    const small = track(budget.admit(d, 10 * MiB));
    await tick();
    expect([third.now, small.now]).toEqual(["waiting", "waiting"]);
    expect(budget.queued).toBe(2);
    expect(budget.inflightBytes).toBe(236 * MiB);

    budget.release(a);
    await tick();
    expect([third.now, small.now]).toEqual(["admitted", "admitted"]);
    expect(budget.inflightBytes).toBe(246 * MiB);
    for (const r of [b, c, d]) budget.release(r);
    expect(budget.inflightBytes).toBe(0);
  });

  test("after the queue timeout: 429 server_busy with retry-after, nothing reserved", async () => {
    const budget = new BodyBudget(200 * MiB, 150 * MiB, 50);
    const first = request();
    await budget.admit(first, 118 * MiB);
    const second = request();
    const err = await budget.admit(second, 118 * MiB).then(
      () => null,
      (e) => e as ApiError,
    );
    expect(err?.status).toBe(429);
    expect(err?.errorCode).toBe("server_busy");
    expect(err?.headers?.["retry-after"]).toBe("1");
    expect(budget.queued).toBe(0);
    budget.release(second);
    expect(budget.inflightBytes).toBe(118 * MiB);
  });

  test("a client that goes away leaves the queue, and the one behind it moves up", async () => {
    const budget = new BodyBudget(200 * MiB, 150 * MiB, 60_000);
    const first = request();
    await budget.admit(first, 100 * MiB);
    const gone = new AbortController();
    const leaving = track(budget.admit(request(), 100 * MiB, undefined, gone.signal));
    const next = request();
    const behind = track(budget.admit(next, 40 * MiB));
    await tick();
    expect([leaving.now, behind.now]).toEqual(["waiting", "waiting"]);
    gone.abort();
    await tick();
    // 100 + 40 fits once the 100 MiB body ahead of it left the queue.
    expect([leaving.now, behind.now]).toEqual(["429 server_busy", "admitted"]);
    expect(budget.inflightBytes).toBe(140 * MiB);
  });

  test("a body larger than the whole budget, or a budget without a queue timeout, is refused at once; over max_body_bytes is 413", async () => {
    const budget = new BodyBudget(400 * MiB, 300 * MiB, 60_000);
    expect(track(budget.admit(request(), 301 * MiB)).now).toBe("waiting");
    await tick();
    const probe = track(budget.admit(request(), 301 * MiB));
    await tick();
    expect(probe.now).toBe("429 server_busy");
    const tooBig = track(budget.admit(request(), 401 * MiB));
    await tick();
    expect(tooBig.now).toBe("413 request_too_large");

    const noQueue = new BodyBudget(200 * MiB, 150 * MiB, 0);
    await noQueue.admit(request(), 100 * MiB);
    const refused = track(noQueue.admit(request(), 100 * MiB));
    await tick();
    expect(refused.now).toBe("429 server_busy");
  });
});
