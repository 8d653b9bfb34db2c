/**
 * What one admission costs: LocalGate (in memory) beside RedisGate (one Lua script to a real
 * redis-server on loopback per admit, one per release), in the same run.
 *   bun bench/gate.ts [count=2000] [concurrency=8]
 * Sequential: one admit + release at a time (latency per pair). Concurrent: `concurrency`
 * users admitting and releasing in a loop (pairs per second). Bounded: `count` pairs per figure.
 */
import { LocalGate, type Gate, type GateLimits } from "../src/core/gate";
import { RedisGate } from "../src/core/redisGate";
import { startRedis } from "../test/support/redisServer";

const count = Math.min(100_000, Number(process.argv[2] ?? 2000));
const concurrency = Math.min(64, Number(process.argv[3] ?? 8));
const limits: GateLimits = { subject: "bench", global: concurrency, perUser: 1, queueSize: 0, queueTimeoutMs: 0 };

async function sequential(gate: Gate): Promise<number> {
  const start = performance.now();
  for (let i = 0; i < count; i++) (await gate.admit(1)).release();
  return ((performance.now() - start) * 1000) / count;
}

async function concurrent(gate: Gate): Promise<number> {
  let left = count;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, user) => {
      while (left-- > 0) {
        const permit = await gate.admit(user);
        // A Redis release is not awaited, but it is sent at once on the same connection, so
        // Redis runs it before this user's next admit.
        permit.release();
      }
    }),
  );
  return count / ((performance.now() - start) / 1000);
}

const redis = await startRedis();
try {
  const local = new LocalGate(limits);
  const shared = new RedisGate(redis.client(), limits, { keyPrefix: "bench:" });
  await sequential(shared); // warm the connection and the script cache
  const rows = [
    ["sequential admit+release, µs per pair", (await sequential(local)).toFixed(2), (await sequential(shared)).toFixed(1)],
    [`${concurrency} users at once, pairs per second`, (await concurrent(local)).toFixed(0), (await concurrent(shared)).toFixed(0)],
  ];
  console.log(`count=${count} concurrency=${concurrency}`);
  console.log(["figure".padEnd(42), "LocalGate".padStart(12), "RedisGate".padStart(12)].join(""));
  for (const [name, a, b] of rows) console.log([name!.padEnd(42), a!.padStart(12), b!.padStart(12)].join(""));
  shared.close();
} finally {
  await redis.stop();
}
