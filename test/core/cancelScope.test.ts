/**
 * A request's cancellation without an AbortController per layer: the signal is made on first
 * read and agrees with the scope, children abort with their parent until released, and a scope
 * that follows a signal stops listening when released.
 */
import { describe, expect, test } from "bun:test";
import { CancelScope } from "../../src/core/cancelScope";

describe("CancelScope", () => {
  test("its signal, read before or after the abort, aborts with the same reason", () => {
    const early = new CancelScope();
    const signal = early.signal;
    const reason = new Error("deadline");
    early.abort(reason);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(reason);

    const late = new CancelScope();
    late.abort(reason);
    expect(late.signal.aborted).toBe(true);
    expect(late.signal.reason).toBe(reason);
  });

  test("aborts once: a second abort changes neither the reason nor calls listeners again", () => {
    const scope = new CancelScope();
    const heard: unknown[] = [];
    scope.onAbort((r) => heard.push(r));
    scope.abort("first");
    scope.abort("second");
    expect(scope.reason).toBe("first");
    expect(heard).toEqual(["first"]);
  });

  test("a child aborts with its parent, with the parent's reason; a released one does not", () => {
    const parent = new CancelScope();
    const kept = parent.child();
    const released = parent.child();
    released.release();
    parent.abort("gone");
    expect(kept.aborted).toBe(true);
    expect(kept.signal.reason).toBe("gone");
    expect(released.aborted).toBe(false);
    // A child of a scope already aborted starts aborted.
    expect(parent.child().reason).toBe("gone");
  });

  test("a child's own abort leaves its parent alone", () => {
    const parent = new CancelScope();
    parent.child().abort("attempt timed out");
    expect(parent.aborted).toBe(false);
  });

  test("onAbort: called at once on an aborted scope; the returned function stops it", () => {
    const scope = new CancelScope();
    const heard: unknown[] = [];
    const stop = scope.onAbort((r) => heard.push(r));
    stop();
    scope.abort("x");
    expect(heard).toEqual([]);
    scope.onAbort((r) => heard.push(r));
    expect(heard).toEqual(["x"]);
  });

  test("following a signal: aborted with it, or not at all once released", () => {
    const controller = new AbortController();
    const scope = CancelScope.following(controller.signal);
    const released = CancelScope.following(controller.signal);
    released.release();
    controller.abort("client left");
    expect(scope.reason).toBe("client left");
    expect(released.aborted).toBe(false);
    expect(CancelScope.following(controller.signal).reason).toBe("client left");
  });
});
