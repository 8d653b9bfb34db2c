/**
 * The concurrency gate: a global limit, a per-user limit and a bounded FIFO wait queue with a
 * timeout. One small interface (admit → release), so a distributed gate can replace it.
 */
import { signalOf, type ClientSignal } from "./clientSignal";

export interface GateLimits {
  /** What is limited, in the refusal messages ("image requests", "chat completions"). */
  subject: string;
  /** Requests running at once, across all users. */
  global: number;
  /** Requests running at once for one user. */
  perUser: number;
  /** Requests allowed to wait; beyond that, refuse at once. */
  queueSize: number;
  /** Longest wait in the queue. */
  queueTimeoutMs: number;
}

export type GateRefusal = "queue_full" | "queue_timeout" | "aborted";

/** Why admission failed, and which limit was in the way (for the 429 message). */
export class GateRejected extends Error {
  override name = "GateRejected";
  constructor(
    readonly reason: GateRefusal,
    readonly limit: "global" | "per_user",
    readonly retryAfterMs: number,
    message: string,
  ) {
    super(message);
  }
}

export interface Permit {
  /** Milliseconds spent waiting in the queue. */
  readonly waitedMs: number;
  /** Idempotent. */
  release(): void;
}

export interface Gate {
  /** A getter signal is read only if the request has to wait (see core/clientSignal). */
  admit(userId: number, signal?: ClientSignal): Promise<Permit>;
  /**
   * A permit now when the request may run at once (no waiting, no promise), else null: the
   * caller then asks admit(). Optional: a gate that must ask elsewhere (Redis) has none.
   */
  admitNow?(userId: number): Permit | null;
  stats(): { running: number; queued: number };
}

interface Waiter {
  userId: number;
  enqueuedAt: number;
  resolve: (p: Permit) => void;
  reject: (e: Error) => void;
  timer: ReturnType<typeof setTimeout>;
  onAbort?: () => void;
  signal?: AbortSignal;
}

export class LocalGate implements Gate {
  private running = 0;
  private readonly perUser = new Map<number, number>();
  private readonly queue: Waiter[] = [];

  constructor(
    private readonly limits: GateLimits,
    private readonly now: () => number = () => performance.now(),
  ) {}

  stats() {
    return { running: this.running, queued: this.queue.length };
  }

  private canRun(userId: number): boolean {
    return this.running < this.limits.global && (this.perUser.get(userId) ?? 0) < this.limits.perUser;
  }

  /** The limit that keeps this user waiting; per-user first because it is the more specific. */
  private blockingLimit(userId: number): "global" | "per_user" {
    return (this.perUser.get(userId) ?? 0) >= this.limits.perUser ? "per_user" : "global";
  }

  private describe(limit: "global" | "per_user"): string {
    return limit === "per_user"
      ? `the per-user limit of ${this.limits.perUser} concurrent ${this.limits.subject}`
      : `the server-wide limit of ${this.limits.global} concurrent ${this.limits.subject}`;
  }

  private grant(userId: number, waitedMs: number): Permit {
    this.running++;
    this.perUser.set(userId, (this.perUser.get(userId) ?? 0) + 1);
    let released = false;
    return {
      waitedMs,
      release: () => {
        if (released) return;
        released = true;
        this.running--;
        const n = (this.perUser.get(userId) ?? 1) - 1;
        if (n === 0) this.perUser.delete(userId);
        else this.perUser.set(userId, n);
        this.drain();
      },
    };
  }

  /** FIFO, but a waiter blocked only by its own per-user limit does not hold up others. */
  private drain(): void {
    for (let i = 0; i < this.queue.length && this.running < this.limits.global; ) {
      const w = this.queue[i]!;
      if (this.canRun(w.userId)) {
        this.queue.splice(i, 1);
        clearTimeout(w.timer);
        if (w.onAbort) w.signal?.removeEventListener("abort", w.onAbort);
        w.resolve(this.grant(w.userId, this.now() - w.enqueuedAt));
      } else {
        i++;
      }
    }
  }

  admitNow(userId: number): Permit | null {
    return this.canRun(userId) ? this.grant(userId, 0) : null;
  }

  admit(userId: number, clientSignal?: ClientSignal): Promise<Permit> {
    // A client already gone takes no slot (its abort event has fired and will not fire again).
    // A lazily given signal is not read for a request admitted at once: it runs either way.
    let signal = typeof clientSignal === "function" ? undefined : clientSignal;
    if (signal?.aborted) return Promise.reject(new GateRejected("aborted", this.blockingLimit(userId), 0, "The client went away before it was admitted."));
    // Every queued waiter is blocked (drain runs on each release), so a newcomer who can run
    // overtakes nobody who could.
    const now = this.admitNow(userId);
    if (now) return Promise.resolve(now);
    signal = signalOf(clientSignal);
    if (signal?.aborted) return Promise.reject(new GateRejected("aborted", this.blockingLimit(userId), 0, "The client went away before it was admitted."));
    const limit = this.blockingLimit(userId);
    if (this.queue.length >= this.limits.queueSize || this.limits.queueTimeoutMs === 0) {
      return Promise.reject(
        new GateRejected(
          "queue_full",
          limit,
          1000,
          this.limits.queueSize === 0
            ? `Too many ${this.limits.subject} at once: ${this.describe(limit)} is reached.`
            : `Too many concurrent requests: ${this.describe(limit)} is reached and the wait queue (${this.limits.queueSize}) is full.`,
        ),
      );
    }
    return new Promise<Permit>((resolve, reject) => {
      const w: Waiter = {
        userId,
        enqueuedAt: this.now(),
        resolve,
        reject,
        signal,
        timer: setTimeout(() => {
          this.remove(w);
          // The client's signal outlives the wait: a listener left on it keeps this request reachable.
          if (w.onAbort) w.signal?.removeEventListener("abort", w.onAbort);
          reject(new GateRejected("queue_timeout", limit, 1000, `Too many concurrent requests: waited ${this.limits.queueTimeoutMs} ms for ${this.describe(limit)}.`));
        }, this.limits.queueTimeoutMs),
      };
      if (signal) {
        w.onAbort = () => {
          this.remove(w);
          clearTimeout(w.timer);
          reject(new GateRejected("aborted", limit, 0, "The client went away while waiting."));
        };
        signal.addEventListener("abort", w.onAbort, { once: true });
      }
      this.queue.push(w);
    });
  }

  private remove(w: Waiter): void {
    const i = this.queue.indexOf(w);
    if (i >= 0) this.queue.splice(i, 1);
  }
}
