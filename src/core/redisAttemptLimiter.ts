/**
 * Attempt throttling shared by every instance through Redis ([redis] url): one counter per
 * key and window, INCR then PEXPIRE on the first attempt (a fixed window that starts with the
 * first attempt, on Redis's clock), in one script so a counter never outlives its window.
 * Keys are hashed: an email or an address never appears in Redis in plain text.
 * A Redis that does not answer within commandTimeoutMs fails the attempt with
 * RedisUnavailable (503), rather than letting guesses through unthrottled or hanging.
 */
import type { RedisClient } from "bun";
import type { AttemptCounter, AttemptCounters } from "./attemptLimiter";
import { evalScript } from "./redisScript";

/** KEYS: the counter. ARGV: windowMs. */
const RECORD = `
local n = redis.call('INCR', KEYS[1])
if n == 1 or redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1])) end
return n
`;

/** KEYS: the counter. ARGV: max. Milliseconds until the window ends when the count reached max, else 0. */
const RETRY_AFTER = `
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n < tonumber(ARGV[1]) then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left < 1 then return 1 end
return left
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

  async retryAfterMs(key: string): Promise<number> {
    return Number(await evalScript(this.client, RETRY_AFTER, [this.key(key)], [this.max], this.commandTimeoutMs));
  }

  async record(key: string): Promise<void> {
    await evalScript(this.client, RECORD, [this.key(key)], [this.windowMs], this.commandTimeoutMs);
  }

  async reset(key: string): Promise<void> {
    await evalScript(this.client, `redis.call('DEL', KEYS[1]) return 1`, [this.key(key)], [], this.commandTimeoutMs);
  }
}

/** Counters in Redis under `<keyPrefix><name>:<hash of the key>`. */
export function redisAttemptCounters(client: RedisClient, options: RedisAttemptOptions): AttemptCounters {
  return (name, max, windowMs) => new RedisAttemptLimiter(client, name, max, windowMs, options);
}
