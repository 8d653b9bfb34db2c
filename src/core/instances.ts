/**
 * Several instances share one database: each has an id and a heartbeat, and every pending
 * request records the instance that runs it. That decides who may refund work a crash left
 * behind:
 * - at start an instance refunds the pending requests it owned itself (a previous run under the
 *   same configured id: nobody else runs them);
 * - every heartbeat it refunds requests whose owner's lease ran out (the owner died, or cannot
 *   reach the database): exactly once, whoever sees them first, because the refund only happens
 *   on the pending → interrupted transition (store/credits refundOnce);
 * - it never touches a request whose owner is alive, so a restart never refunds work another
 *   live instance is doing.
 * An instance that could not write its own heartbeat for a whole lease reports itself unready:
 * the others may already be refunding its requests.
 */
import { backgroundTimer, type Clock, type Schedule } from "./clock";
import type { Logger } from "../logger";

export interface InstanceRecords {
  register(id: string, host: string | null, now: number): Promise<number | null>;
  heartbeat(id: string, host: string | null, now: number): Promise<void>;
  pendingOwnedBy(owner: string, limit: number): Promise<string[]>;
  orphaned(self: string, now: number, leaseMs: number, limit: number): Promise<string[]>;
  prune(now: number, olderThanMs: number): Promise<number>;
}

export interface LivenessSettings {
  id: string;
  host: string | null;
  heartbeatMs: number;
  leaseMs: number;
}

export interface LivenessDeps {
  records: InstanceRecords;
  /** Refunds one interrupted request (true when this call refunded it). */
  refundInterrupted: (requestId: string, reason: string) => Promise<boolean>;
  clock: Clock;
  logger: Logger;
  /** A one-shot timer (the fake clock's in tests). */
  schedule?: Schedule;
}

/** Requests refunded per sweep at most (the next sweep takes the rest). */
const SWEEP_BATCH = 200;
/** Dead instances' rows are kept a day (for operators), then forgotten. */
const PRUNE_AFTER_MS = 24 * 60 * 60 * 1000;

export class InstanceLiveness {
  /** When this instance's heartbeat was last written; null before start (nothing of its own to guard yet). */
  private lastBeat: number | null = null;
  private cancel: (() => void) | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private readonly schedule: NonNullable<LivenessDeps["schedule"]>;

  constructor(
    readonly settings: LivenessSettings,
    private readonly deps: LivenessDeps,
  ) {
    if (settings.leaseMs < settings.heartbeatMs * 2) throw new RangeError("the instance lease must be at least two heartbeats long");
    this.schedule = deps.schedule ?? backgroundTimer;
  }

  get id(): string {
    return this.settings.id;
  }

  /** Registers this instance and refunds what a previous run under its id left pending. */
  async start(): Promise<string[]> {
    const { id, host, heartbeatMs } = this.settings;
    const now = this.deps.clock();
    const previousBeat = await this.deps.records.register(id, host, now);
    this.lastBeat = now;
    if (previousBeat !== null && now - previousBeat < heartbeatMs) {
      // Either a restart within one heartbeat, or a second live instance under the same id.
      this.deps.logger.warn("instance id was alive moments ago; give every instance its own [instance] id", { instance: id });
    }
    const refunded: string[] = [];
    for (;;) {
      const ids = await this.deps.records.pendingOwnedBy(id, SWEEP_BATCH);
      let progressed = false;
      for (const requestId of ids) {
        if (await this.deps.refundInterrupted(requestId, "the server stopped before the request finished")) {
          refunded.push(requestId);
          progressed = true;
        }
      }
      if (ids.length < SWEEP_BATCH || !progressed) break;
    }
    this.arm();
    return refunded;
  }

  /** True while this instance's heartbeat is within its lease (others leave its work alone). */
  healthy(): boolean {
    if (this.stopped) return false;
    return this.lastBeat === null || this.deps.clock() - this.lastBeat < this.settings.leaseMs;
  }

  /** One heartbeat and one sweep; the timer calls it, tests call it directly. */
  async tick(): Promise<string[]> {
    const { id, host, leaseMs } = this.settings;
    const now = this.deps.clock();
    try {
      await this.deps.records.heartbeat(id, host, now);
      this.lastBeat = now;
    } catch (e) {
      this.deps.logger.warn("could not write this instance's heartbeat", { instance: id, error: String(e) });
      return [];
    }
    const refunded: string[] = [];
    try {
      for (const requestId of await this.deps.records.orphaned(id, now, leaseMs, SWEEP_BATCH)) {
        if (await this.deps.refundInterrupted(requestId, "the instance running the request stopped")) refunded.push(requestId);
      }
      if (refunded.length > 0) this.deps.logger.warn("refunded requests of an instance that stopped", { count: refunded.length, request_ids: refunded });
      await this.deps.records.prune(now, PRUNE_AFTER_MS);
    } catch (e) {
      this.deps.logger.warn("could not sweep requests of stopped instances", { error: String(e) });
    }
    return refunded;
  }

  private arm(): void {
    if (this.stopped) return;
    this.cancel = this.schedule(() => {
      this.cancel = null;
      this.running = this.tick().then(
        () => undefined,
        () => undefined,
      );
      void this.running.finally(() => {
        this.running = null;
        this.arm();
      });
    }, this.settings.heartbeatMs);
  }

  /** Stops beating (a graceful stop); a sweep in progress finishes first. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.cancel?.();
    this.cancel = null;
    await this.running;
  }
}
