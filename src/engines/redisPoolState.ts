/**
 * An account pool's shared state in Redis ([redis] url), so every instance sees the same
 * in-flight counts, rests, failure counts and probes:
 * - in-flight: a sorted set of leases per account, scored by their expiry on Redis's clock;
 *   the holder renews its leases every renewMs, so an instance that dies frees its slots after
 *   leaseMs. Taking a slot checks the rest, the probe and the capacity in one script.
 * - a rest: a key with a PX expiry (its remaining time is the cooldown; no instance clock
 *   involved); never shortened by a shorter one.
 * - failures, the 429 streak and "probe due": a small hash, changed by atomic HINCRBY/HSET.
 * While a probe is due the capacity is 1 for everyone, so exactly one probe runs across all
 * instances (its lease expires like any other if its holder dies).
 *
 * Each command is bounded (commandTimeoutMs): a Redis that does not answer makes the caller
 * fail with RedisUnavailable, and the pool turns that into a clean 503 (refunded).
 */
import type { RedisClient } from "bun";
import { evalScript, LUA_NOW } from "../core/redisScript";
import type { AccountLease, PoolState, SharedAccountState } from "./poolState";

export interface RedisPoolStateOptions {
  /** Keys start with this, e.g. "atelier:pool:<upstream>:". */
  keyPrefix: string;
  /** How long a slot lives without renewal. */
  leaseMs?: number;
  /** How often the holder renews its slots (well under leaseMs). */
  renewMs?: number;
  /** How often a waiting request looks again for capacity another instance freed. */
  pollMs?: number;
  /** Longest wait for one Redis answer. */
  commandTimeoutMs?: number;
}

/** ARGV: prefix, then account ids. Returns per account: in-flight, rest left (ms, ≤0 none), failures, streak, probe. */
const READ =
  LUA_NOW +
  `
local out = {}
for i = 2, #ARGV do
  local base = ARGV[1] .. ARGV[i] .. ':'
  redis.call('ZREMRANGEBYSCORE', base .. 'leases', '-inf', now)
  local st = redis.call('HMGET', base .. 'state', 'failures', 'streak', 'probe')
  table.insert(out, redis.call('ZCARD', base .. 'leases'))
  table.insert(out, redis.call('PTTL', base .. 'cool'))
  table.insert(out, st[1] and tonumber(st[1]) or 0)
  table.insert(out, st[2] and tonumber(st[2]) or 0)
  table.insert(out, st[3] and tonumber(st[3]) or 0)
end
return out
`;

/** KEYS: leases, cool, state. ARGV: lease id, leaseMs, capacity. 1 when taken, 0 when resting or full. */
const TAKE =
  LUA_NOW +
  `
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local cap = tonumber(ARGV[3])
if redis.call('HGET', KEYS[3], 'probe') == '1' then cap = 1 end
if redis.call('ZCARD', KEYS[1]) >= cap then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return 1
`;

/** ARGV: leaseMs, then (leases key, lease id) pairs; only leases still there are renewed (XX). */
const RENEW =
  LUA_NOW +
  `
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  redis.call('ZADD', ARGV[i], 'XX', now + ttl, ARGV[i + 1])
  redis.call('PEXPIRE', ARGV[i], ttl * 2)
end
return 1
`;

const RELEASE = `redis.call('ZREM', KEYS[1], ARGV[1]) return 1`;

/** KEYS: state. Clears failures, streak and probe. */
const SUCCEEDED = `redis.call('HSET', KEYS[1], 'failures', 0, 'streak', 0, 'probe', 0) return 1`;

/** KEYS: state. ARGV: field. Returns { new count, probe due (0/1) }. */
const FAILED = `
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local p = redis.call('HGET', KEYS[1], 'probe')
return { n, p == '1' and 1 or 0 }
`;

/** KEYS: cool, state. ARGV: ms, probe (0/1). A rest is never shortened. */
const COOL = `
local ms = tonumber(ARGV[1])
if ms > 0 and redis.call('PTTL', KEYS[1]) < ms then redis.call('SET', KEYS[1], '1', 'PX', ms) end
if ARGV[2] == '1' then redis.call('HSET', KEYS[2], 'probe', 1) end
return 1
`;

/** KEYS: cool, state. */
const RESET = `
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'failures', 0, 'streak', 0, 'probe', 0)
return 1
`;

function idle(): SharedAccountState {
  return { inFlight: 0, coolingUntil: 0, consecutiveFailures: 0, rateLimitStreak: 0, probeNeeded: false };
}

export class RedisPoolState implements PoolState {
  readonly pollMs: number;
  private readonly prefix: string;
  private readonly leaseMs: number;
  private readonly renewMs: number;
  private readonly commandTimeoutMs: number;
  /** What the last read (or this instance's own change) showed, per account. */
  private readonly seen = new Map<string, SharedAccountState>();
  /** Slots this instance holds, renewed by the timer. */
  private readonly held = new Map<string, AccountLease>();
  private renewTimer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly client: RedisClient,
    options: RedisPoolStateOptions,
  ) {
    this.prefix = options.keyPrefix;
    this.leaseMs = options.leaseMs ?? 10_000;
    this.renewMs = options.renewMs ?? 3_000;
    this.pollMs = options.pollMs ?? 100;
    this.commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
  }

  private keys(accountId: string) {
    const base = `${this.prefix}${accountId}:`;
    return { leases: `${base}leases`, cool: `${base}cool`, state: `${base}state` };
  }

  private run(script: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return evalScript(this.client, script, keys, args, this.commandTimeoutMs);
  }

  private update(accountId: string, change: Partial<SharedAccountState>): void {
    this.seen.set(accountId, { ...this.known(accountId), ...change });
  }

  async read(accountIds: readonly string[], now: number): Promise<Map<string, SharedAccountState>> {
    const reply = (await this.run(READ, [], [this.prefix, ...accountIds])) as number[];
    const out = new Map<string, SharedAccountState>();
    accountIds.forEach((id, i) => {
      const [inFlight, restMs, failures, streak, probe] = reply.slice(i * 5, i * 5 + 5).map(Number) as [number, number, number, number, number];
      const s = { inFlight, coolingUntil: restMs > 0 ? now + restMs : 0, consecutiveFailures: failures, rateLimitStreak: streak, probeNeeded: probe === 1 };
      this.seen.set(id, s);
      out.set(id, { ...s });
    });
    return out;
  }

  known(accountId: string): SharedAccountState {
    return { ...(this.seen.get(accountId) ?? idle()) };
  }

  async take(accountId: string, maxConcurrency: number): Promise<AccountLease | null> {
    const k = this.keys(accountId);
    const id = crypto.randomUUID();
    const taken = Number(await this.run(TAKE, [k.leases, k.cool, k.state], [id, this.leaseMs, maxConcurrency]));
    if (taken !== 1) return null;
    const lease = { accountId, id };
    this.held.set(id, lease);
    this.update(accountId, { inFlight: this.known(accountId).inFlight + 1 });
    this.ensureRenewing();
    return lease;
  }

  release(lease: AccountLease): void {
    if (!this.held.delete(lease.id)) return;
    if (this.held.size === 0) this.stopRenewing();
    this.update(lease.accountId, { inFlight: Math.max(0, this.known(lease.accountId).inFlight - 1) });
    // Best effort: if Redis is away, the lease expires on its own after leaseMs.
    this.run(RELEASE, [this.keys(lease.accountId).leases], [lease.id]).catch(() => undefined);
  }

  async succeeded(accountId: string): Promise<void> {
    await this.run(SUCCEEDED, [this.keys(accountId).state], []);
    this.update(accountId, { consecutiveFailures: 0, rateLimitStreak: 0, probeNeeded: false });
  }

  async failed(accountId: string, kind: "failed" | "rate_limited"): Promise<{ count: number; probeNeeded: boolean }> {
    const [count, probe] = ((await this.run(FAILED, [this.keys(accountId).state], [kind === "rate_limited" ? "streak" : "failures"])) as number[]).map(Number) as [number, number];
    this.update(accountId, kind === "rate_limited" ? { rateLimitStreak: count } : { consecutiveFailures: count });
    return { count, probeNeeded: probe === 1 };
  }

  async coolDown(accountId: string, ms: number, probe: boolean, now: number): Promise<void> {
    const k = this.keys(accountId);
    await this.run(COOL, [k.cool, k.state], [Math.max(0, Math.ceil(ms)), probe ? 1 : 0]);
    const before = this.known(accountId);
    this.update(accountId, { coolingUntil: Math.max(before.coolingUntil, now + ms), probeNeeded: before.probeNeeded || probe });
  }

  async reset(accountId: string): Promise<void> {
    const k = this.keys(accountId);
    await this.run(RESET, [k.cool, k.state], []);
    this.update(accountId, { coolingUntil: 0, consecutiveFailures: 0, rateLimitStreak: 0, probeNeeded: false });
  }

  private ensureRenewing(): void {
    if (this.renewTimer) return;
    this.renewTimer = setInterval(() => {
      if (this.held.size === 0) return;
      const args: (string | number)[] = [this.leaseMs];
      for (const l of this.held.values()) args.push(this.keys(l.accountId).leases, l.id);
      // A failed renewal is tried again at the next tick; leaseMs leaves room for two misses.
      this.run(RENEW, [], args).catch(() => undefined);
    }, this.renewMs);
    this.renewTimer.unref?.();
  }

  private stopRenewing(): void {
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.renewTimer = undefined;
  }

  /** Stops renewing without giving anything back: what a crashed instance looks like (tests). */
  abandon(): void {
    this.stopRenewing();
    this.held.clear();
  }

  close(): void {
    this.stopRenewing();
  }
}
