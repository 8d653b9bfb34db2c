/**
 * One Lua script run on Redis, bounded in time: a Redis that does not answer (stopped, cut
 * off, reconnecting) fails the caller after `timeoutMs` with RedisUnavailable, never hangs
 * it. Bun's client reconnects on its own, so the next call after Redis is back succeeds.
 */
import type { RedisClient } from "bun";

/** Redis did not answer in time, or refused the command. */
export class RedisUnavailable extends Error {
  override name = "RedisUnavailable";
}

export async function evalScript(client: RedisClient, script: string, keys: readonly string[], args: readonly (string | number)[], timeoutMs: number): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RedisUnavailable(`Redis did not answer within ${timeoutMs} ms.`)), timeoutMs);
  });
  try {
    return await Promise.race([client.send("EVAL", [script, String(keys.length), ...keys, ...args.map(String)]), timeout]);
  } catch (e) {
    if (e instanceof RedisUnavailable) throw e;
    throw new RedisUnavailable(`Redis refused the command: ${e instanceof Error ? e.message : String(e)}`);
  } finally {
    clearTimeout(timer);
  }
}

/** The time in milliseconds as Redis sees it, inside a script (so instances' clocks do not matter). */
export const LUA_NOW = `local __t = redis.call('TIME')
local now = tonumber(__t[1]) * 1000 + math.floor(tonumber(__t[2]) / 1000)
`;
