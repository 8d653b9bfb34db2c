/** What a listener needs of a cancellation: whether it happened, why, and a way to hear it. */
export interface CancelView {
  readonly aborted: boolean;
  readonly reason: unknown;
  /** Calls `listener` once when it aborts (at once if it has); returns the function that stops listening. */
  onAbort(listener: (reason: unknown) => void): () => void;
}

/** Calls `listener` once when `signal` aborts (at once if it has); returns the function that stops listening. */
export function listenForAbort(signal: AbortSignal, listener: (reason: unknown) => void): () => void {
  if (signal.aborted) {
    listener(signal.reason);
    return () => {};
  }
  const onAbort = () => listener(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}

/**
 * The cancellation of one piece of work (a request, one attempt of it): aborted once, with a
 * reason, by whoever owns it (its deadline, the client's hang-up, its parent). It stands in for
 * an AbortController per layer, which a request paid for twice (the flow's deadline and the
 * pool's attempt) plus an event listener linking them: here the AbortSignal is made only when
 * something reads `signal` (fetch does, for the attempt), and a child scope is linked to its
 * parent by a list entry.
 */
export class CancelScope implements CancelView {
  aborted = false;
  reason: unknown = undefined;
  private controller: AbortController | null = null;
  private parent: CancelScope | null = null;
  private children: CancelScope[] | null = null;
  private listeners: Array<(reason: unknown) => void> | null = null;
  /** Removes the listener on the signal this scope follows (CancelScope.following). */
  private unfollow: (() => void) | null = null;

  /** A scope aborted when `signal` is (linked by one listener, removed by `release`). */
  static following(signal: AbortSignal): CancelScope {
    const scope = new CancelScope();
    scope.unfollow = listenForAbort(signal, (reason) => scope.abort(reason));
    return scope;
  }

  /** An AbortSignal that aborts with this scope (made on first read). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** Aborts the scope, its signal and its children, once; later calls change nothing. */
  abort(reason: unknown = new DOMException("This operation was aborted", "AbortError")): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
    const children = this.children;
    const listeners = this.listeners;
    this.children = null;
    this.listeners = null;
    if (children) for (const child of children) child.abort(reason);
    if (listeners) for (const listener of listeners) listener(reason);
  }

  /** A scope aborted with this one (at once if this one already is); `release` it when its work is done. */
  child(): CancelScope {
    const child = new CancelScope();
    if (this.aborted) child.abort(this.reason);
    else {
      child.parent = this;
      (this.children ??= []).push(child);
    }
    return child;
  }

  /** Calls `listener` once when the scope aborts (at once if it has); returns the function that stops listening. */
  onAbort(listener: (reason: unknown) => void): () => void {
    if (this.aborted) {
      listener(this.reason);
      return () => {};
    }
    (this.listeners ??= []).push(listener);
    return () => {
      const at = this.listeners?.indexOf(listener) ?? -1;
      if (at >= 0) this.listeners!.splice(at, 1);
    };
  }

  /** The work is done: unlinked from its parent (or the signal it followed), so neither keeps it. */
  release(): void {
    const siblings = this.parent?.children;
    if (siblings) {
      const at = siblings.indexOf(this);
      if (at >= 0) siblings.splice(at, 1);
    }
    this.parent = null;
    this.unfollow?.();
    this.unfollow = null;
  }
}
