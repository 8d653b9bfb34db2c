/**
 * The concurrency gate shared by every instance through Redis ([redis] url): the same limits,
 * FIFO queue, timeout and refusals as LocalGate, but the state lives in Redis.
 *
 * A slot is a lease: a member of a sorted set scored by its expiry (Redis's own clock, so the
 * instances' clocks do not matter), once in the gate's set and once in the user's. The holder
 * renews its leases every renewMs; an instance that dies stops renewing and its slots come back
 * after leaseMs. A waiter is a member of the queue set (scored by an INCR sequence, so FIFO
 * holds across instances) with its own lease, so a dead instance's waiters leave the queue too.
 * Every decision is one Lua script (atomic); expired leases are purged in the same script.
 * Waiters learn of a free slot by polling (bounded: one script per waiter per pollMs, and at
 * once when a permit of this instance is released).
 *
 * The keys a script touches beyond KEYS (the per-user sets) are built inside it, which is fine
 * for one Redis server (not for Redis Cluster).
 */
import type { RedisClient } from "bun";
import { signalOf, type ClientSignal } from "./clientSignal";
import { GateRejected, type Gate, type GateLimits, type Permit } from "./gate";

/** Redis did not answer in time or refused: the request is refused with 503, never charged. */
export class GateUnavailable extends Error {
  override name = "GateUnavailable";
}

export interface RedisGateOptions {
  /** Keys start with this, e.g. "atelier:gate:image:". */
  keyPrefix: string;
  /** How long a lease lives without renewal. */
  leaseMs?: number;
  /** How often the holder renews its leases (well under leaseMs). */
  renewMs?: number;
  /** How often a waiter asks whether it may run. */
  pollMs?: number;
  /** Longest wait for one Redis answer before the admission fails with GateUnavailable. */
  commandTimeoutMs?: number;
  now?: () => number;
}

/**
 * Shared by ADMIT and POLL: after purging expired leases, may the waiter `me` (or a newcomer,
 * at the end of the queue) run? Walks the queue in order, letting every earlier waiter that
 * could run take a slot first; one blocked only by its own per-user limit holds up nobody.
 */
const COMMON = `
local slots, queue, qlease, quser, userPrefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
local gone = redis.call('ZRANGEBYSCORE', qlease, '-inf', now)
for _, w in ipairs(gone) do
  redis.call('ZREM', queue, w)
  redis.call('HDEL', quser, w)
end
redis.call('ZREMRANGEBYSCORE', qlease, '-inf', now)
local function userCount(u)
  return redis.call('ZCOUNT', userPrefix .. u, '(' .. now, '+inf')
end
local function eligible(me, myUser, global, perUser)
  local free = global - redis.call('ZCARD', slots)
  local taken = {}
  local function count(u)
    if taken[u] == nil then taken[u] = userCount(u) end
    return taken[u]
  end
  local ahead = redis.call('ZRANGE', queue, 0, -1)
  for _, w in ipairs(ahead) do
    if free <= 0 then break end
    if w == me then break end
    local u = redis.call('HGET', quser, w)
    if u and count(u) < perUser then
      taken[u] = taken[u] + 1
      free = free - 1
    end
  end
  if free > 0 and count(myUser) < perUser then return 1 end
  if count(myUser) >= perUser then return -2 end
  return -1
end
local function grant(id, u, ttl)
  redis.call('ZADD', slots, now + ttl, id)
  redis.call('ZADD', userPrefix .. u, now + ttl, id)
  redis.call('PEXPIRE', userPrefix .. u, ttl * 2)
  redis.call('PEXPIRE', slots, ttl * 2)
end
`;

/**
 * A newcomer. ARGV: id, user, leaseMs, global, perUser, queueSize.
 * Returns 1 (admitted), 0/-2 queue full (global / per-user limit), 2/-3 queued (global / per-user).
 */
const ADMIT =
  COMMON +
  `
local id, u, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local global, perUser, queueSize = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local e = eligible(nil, u, global, perUser)
if e == 1 then grant(id, u, ttl) return 1 end
if redis.call('ZCARD', queue) >= queueSize then
  if e == -2 then return -2 end
  return 0
end
local seq = redis.call('INCR', KEYS[6])
redis.call('ZADD', queue, seq, id)
redis.call('ZADD', qlease, now + ttl, id)
redis.call('HSET', quser, id, u)
for _, k in ipairs({queue, qlease, quser}) do redis.call('PEXPIRE', k, ttl * 2) end
if e == -2 then return -3 end
return 2
`;

/**
 * A waiter asks again. ARGV: id, user, leaseMs, global, perUser. Returns 1 (admitted, removed
 * from the queue), 2/-3 (still waiting; its waiter lease renewed), 4 (not in the queue: its
 * lease expired while this instance stalled; the caller enqueues it again).
 */
const POLL =
  COMMON +
  `
local id, u, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local global, perUser = tonumber(ARGV[4]), tonumber(ARGV[5])
if not redis.call('ZSCORE', queue, id) then return 4 end
local e = eligible(id, u, global, perUser)
if e == 1 then
  redis.call('ZREM', queue, id)
  redis.call('ZREM', qlease, id)
  redis.call('HDEL', quser, id)
  grant(id, u, ttl)
  return 1
end
redis.call('ZADD', qlease, now + ttl, id)
for _, k in ipairs({queue, qlease, quser}) do redis.call('PEXPIRE', k, ttl * 2) end
if e == -2 then return -3 end
return 2
`;

/** Renews this instance's leases. ARGV: leaseMs, then id,user pairs. Only existing members (XX). */
const RENEW = `
local slots, userPrefix = KEYS[1], KEYS[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  redis.call('ZADD', slots, 'XX', now + ttl, ARGV[i])
  redis.call('ZADD', userPrefix .. ARGV[i + 1], 'XX', now + ttl, ARGV[i])
  redis.call('PEXPIRE', userPrefix .. ARGV[i + 1], ttl * 2)
end
redis.call('PEXPIRE', slots, ttl * 2)
return 1
`;

/** Gives back a slot or leaves the queue (whichever the id is). ARGV: id, user. Idempotent. */
const RELEASE = `
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[5] .. ARGV[2], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
`;

interface Held {
  id: string;
  userId: number;
}

interface Waiting extends Held {
  limit: "global" | "per_user";
  /** Set once the wait is over (admitted, timed out, aborted): later outcomes are ignored. */
  settled: boolean;
  polling: boolean;
  poll: () => void;
  /** Ends the wait with this error (and leaves the queue). */
  abandon: (e: Error) => void;
}

export class RedisGate implements Gate {
  private readonly keys: string[];
  private readonly leaseMs: number;
  private readonly renewMs: number;
  private readonly pollMs: number;
  private readonly commandTimeoutMs: number;
  private readonly now: () => number;
  /** Slots this instance holds (renewed by the timer). */
  private readonly held = new Map<string, Held>();
  /** This instance's waiters (their queue leases are renewed by their polls). */
  private readonly waiting = new Set<Waiting>();
  private renewTimer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly client: RedisClient,
    private readonly limits: GateLimits,
    options: RedisGateOptions,
  ) {
    const p = options.keyPrefix;
    this.keys = [`${p}slots`, `${p}queue`, `${p}qlease`, `${p}quser`, `${p}user:`, `${p}seq`];
    this.leaseMs = options.leaseMs ?? 10_000;
    this.renewMs = options.renewMs ?? 3_000;
    this.pollMs = options.pollMs ?? 100;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
    this.now = options.now ?? (() => performance.now());
  }

  /** This instance's view: slots it holds and requests it has waiting (the metrics gauges). */
  stats() {
    return { running: this.held.size, queued: this.waiting.size };
  }

  /**
   * Stops renewing (the leases then expire) and closes the connection. A request still waiting
   * is answered GateUnavailable: only marked settled, its promise never ended and its poll timer
   * kept the process alive.
   */
  close(): void {
    this.stopRenewing();
    for (const w of [...this.waiting]) w.abandon(new GateUnavailable("The server is stopping."));
    this.client.close();
  }

  /** Stops renewing without giving anything back: what a crashed instance looks like (tests). */
  stopRenewing(): void {
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.renewTimer = undefined;
    this.held.clear();
  }

  private describe(limit: "global" | "per_user"): string {
    return limit === "per_user"
      ? `the per-user limit of ${this.limits.perUser} concurrent ${this.limits.subject}`
      : `the server-wide limit of ${this.limits.global} concurrent ${this.limits.subject}`;
  }

  /** One script run, bounded in time: a Redis that does not answer fails the admission, never hangs it. */
  private async run(script: string, args: (string | number)[]): Promise<number> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new GateUnavailable(`Redis did not answer within ${this.commandTimeoutMs} ms.`)), this.commandTimeoutMs);
    });
    try {
      const reply = await Promise.race([this.client.send("EVAL", [script, String(this.keys.length), ...this.keys, ...args.map(String)]), timeout]);
      return Number(reply);
    } catch (e) {
      if (e instanceof GateUnavailable) throw e;
      throw new GateUnavailable(`Redis refused the gate's command: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  private grant(held: Held, waitedMs: number): Permit {
    this.held.set(held.id, held);
    this.ensureRenewing();
    let released = false;
    return {
      waitedMs,
      release: () => {
        if (released) return;
        released = true;
        this.held.delete(held.id);
        if (this.held.size === 0) this.stopTimer();
        // Best effort: if Redis is away, the lease expires on its own after leaseMs.
        this.run(RELEASE, [held.id, held.userId]).then(
          () => this.wakeLocalWaiters(),
          () => undefined,
        );
      },
    };
  }

  private ensureRenewing(): void {
    if (this.renewTimer) return;
    this.renewTimer = setInterval(() => {
      if (this.held.size === 0) return;
      const args: (string | number)[] = [this.leaseMs];
      for (const h of this.held.values()) args.push(h.id, h.userId);
      // RENEW reads only KEYS[1] and KEYS[5]; a failed renewal is retried at the next tick.
      this.run(RENEW, args).catch(() => undefined);
    }, this.renewMs);
    this.renewTimer.unref?.();
  }

  private stopTimer(): void {
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.renewTimer = undefined;
  }

  private wakeLocalWaiters(): void {
    for (const w of this.waiting) w.poll();
  }

  async admit(userId: number, clientSignal?: ClientSignal): Promise<Permit> {
    let signal = typeof clientSignal === "function" ? undefined : clientSignal;
    if (signal?.aborted) throw new GateRejected("aborted", "global", 0, "The client went away before it was admitted.");
    const id = crypto.randomUUID();
    const queueSize = this.limits.queueTimeoutMs === 0 ? 0 : this.limits.queueSize;
    const answer = await this.run(ADMIT, [id, userId, this.leaseMs, this.limits.global, this.limits.perUser, queueSize]);
    if (answer === 1) return this.grant({ id, userId }, 0);
    const limit = answer === -2 || answer === -3 ? "per_user" : "global";
    if (answer === 0 || answer === -2) {
      throw new GateRejected(
        "queue_full",
        limit,
        1000,
        queueSize === 0
          ? `Too many ${this.limits.subject} at once: ${this.describe(limit)} is reached.`
          : `Too many concurrent requests: ${this.describe(limit)} is reached and the wait queue (${this.limits.queueSize}) is full.`,
      );
    }
    return this.wait(id, userId, limit, signalOf(clientSignal));
  }

  /** Queued in Redis as `id`: poll until admitted, timed out or aborted; leave the queue on the latter two. */
  private wait(id: string, userId: number, limit: "global" | "per_user", signal: AbortSignal | undefined): Promise<Permit> {
    const enqueuedAt = this.now();
    return new Promise<Permit>((resolve, reject) => {
      const w: Waiting = {
        id,
        userId,
        limit,
        settled: false,
        polling: false,
        poll: () => void poll(),
        abandon: (e) => finish(e),
      };
      const finish = (e: Error) => {
        if (w.settled) return;
        w.settled = true;
        this.waiting.delete(w);
        clearTimeout(timer);
        clearInterval(ticker);
        if (onAbort) signal?.removeEventListener("abort", onAbort);
        this.run(RELEASE, [id, userId]).catch(() => undefined);
        reject(e);
      };
      const poll = async () => {
        if (w.settled || w.polling) return;
        w.polling = true;
        try {
          let answer = await this.run(POLL, [id, userId, this.leaseMs, this.limits.global, this.limits.perUser]);
          if (answer === 4 && !w.settled) {
            // Our queue lease lapsed (this instance stalled past leaseMs): queue again at the end.
            answer = await this.run(ADMIT, [id, userId, this.leaseMs, this.limits.global, this.limits.perUser, this.limits.queueSize]);
          }
          if (answer === 1) {
            const permit = this.grant({ id, userId }, this.now() - enqueuedAt);
            if (w.settled) return permit.release(); // timed out or aborted meanwhile: give it back
            w.settled = true;
            this.waiting.delete(w);
            clearTimeout(timer);
            clearInterval(ticker);
            if (onAbort) signal?.removeEventListener("abort", onAbort);
            resolve(permit);
          } else if (answer === 0 || answer === -2) {
            finish(new GateRejected("queue_full", limit, 1000, `Too many concurrent requests: ${this.describe(limit)} is reached and the wait queue (${this.limits.queueSize}) is full.`));
          } else {
            w.limit = answer === -3 ? "per_user" : "global";
          }
        } catch (e) {
          finish(e instanceof Error ? e : new GateUnavailable(String(e)));
        } finally {
          w.polling = false;
        }
      };
      const timer = setTimeout(
        () => finish(new GateRejected("queue_timeout", w.limit, 1000, `Too many concurrent requests: waited ${this.limits.queueTimeoutMs} ms for ${this.describe(w.limit)}.`)),
        this.limits.queueTimeoutMs,
      );
      const ticker = setInterval(() => void poll(), this.pollMs);
      const onAbort = signal ? () => finish(new GateRejected("aborted", w.limit, 0, "The client went away while waiting.")) : undefined;
      if (signal && onAbort) {
        if (signal.aborted) return onAbort();
        signal.addEventListener("abort", onAbort, { once: true });
      }
      this.waiting.add(w);
    });
  }
}
