/**
 * Attempt throttling shared by every instance through Redis ([redis] url): one counter per
 * key and window, INCR then PEXPIRE on the first attempt (a fixed window that starts with the
 * first attempt, on Redis's clock). Taking an attempt (compare, INCR, PEXPIRE) is one script,
 * so it is atomic across instances and a counter never outlives its window.
 * Keys are hashed: an email or an address never appears in Redis in plain text.
 * A Redis that does not answer within commandTimeoutMs fails the attempt with
 * RedisUnavailable (503), rather than letting guesses through unthrottled or hanging.
 */
import type { RedisClient } from "bun";
import type { AttemptCounter, AttemptCounters } from "./attemptLimiter";
import { evalScript } from "./redisScript";

/**
 * KEYS: the counter. ARGV: max, windowMs. Takes an attempt in one step (a script runs alone on
 * Redis, so concurrent takes from any instance cannot all pass): under max, INCR (and PEXPIRE on
 * the first of a window) and 0; at max, nothing counted and the milliseconds the window has left.
 * A counter found without a TTL (none should be) is given one, so it never outlives a window.
 */
const TAKE = `
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then
  local left = redis.call('PTTL', KEYS[1])
  if left >= 0 then return math.max(left, 1) end
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  return tonumber(ARGV[2])
end
n = redis.call('INCR', KEYS[1])
if n == 1 or redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2])) end
return 0
`;

/** KEYS: the counter. DECR, keeping the window's TTL; never below zero, nothing for an ended window. */
const GIVE_BACK = `
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 1
`;

export interface RedisAttemptOptions {
  /** Keys start with this, e.g. "atelier:attempts:". */
  keyPrefix: string;
  commandTimeoutMs?: number;
}

export class RedisAttemptLimiter implements AttemptCounter {
  private readonly commandTimeoutMs: number;

  constructor(
    private readonly client: RedisClient,
    private readonly name: string,
    private readonly max: number,
    private readonly windowMs: number,
    private readonly options: RedisAttemptOptions,
  ) {
    this.commandTimeoutMs = options.commandTimeoutMs ?? 2_000;
  }

  private key(key: string): string {
    const digest = new Bun.CryptoHasher("sha256").update(key).digest("hex").slice(0, 32);
    return `${this.options.keyPrefix}${this.name}:${digest}`;
  }

  async take(key: string): Promise<number> {
    return Number(await evalScript(this.client, TAKE, [this.key(key)], [this.max, this.windowMs], this.commandTimeoutMs));
  }

  async giveBack(key: string): Promise<void> {
    await evalScript(this.client, GIVE_BACK, [this.key(key)], [], this.commandTimeoutMs);
  }

  async reset(key: string): Promise<void> {
    await evalScript(this.client, `redis.call('DEL', KEYS[1]) return 1`, [this.key(key)], [], this.commandTimeoutMs);
  }
}

/** Counters in Redis under `<keyPrefix><name>:<hash of the key>`. */
export function redisAttemptCounters(client: RedisClient, options: RedisAttemptOptions): AttemptCounters {
  return (name, max, windowMs) => new RedisAttemptLimiter(client, name, max, windowMs, options);
}
