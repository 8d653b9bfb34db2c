/**
 * A real redis-server (Debian's, installed by scripts/ensure-redis.sh) on a free loopback port,
 * with nothing saved to disk; each test file starts its own and stops it after.
 */
import { RedisClient } from "bun";
import { createServer } from "node:net";

export interface TestRedis {
  url: string;
  port: number;
  client(): RedisClient;
  /** Freezes the server (SIGSTOP): connections stay open and nothing answers, the worst case for a hang. */
  pause(): void;
  /** Lets a paused server answer again (SIGCONT). */
  resume(): void;
  /** Kills the server and starts a fresh one (empty) on the same port: clients must reconnect. */
  restart(): Promise<void>;
  stop(): Promise<void>;
  /** The redis-server's process id (changes on restart). */
  readonly pid: number;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

function spawnRedis(port: number, password: string | undefined) {
  const auth = password === undefined ? [] : ["--requirepass", password];
  return Bun.spawn(["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", ...auth], {
    stdout: "ignore",
    stderr: "inherit",
  });
}

/** Ready when it answers PING (bounded: 100 tries, 50 ms apart). */
async function untilAnswering(url: string, port: number): Promise<void> {
  for (let i = 0; ; i++) {
    const probe = new RedisClient(url, { connectionTimeout: 500, autoReconnect: false });
    try {
      if ((await probe.send("PING", [])) === "PONG") break;
    } catch {
      if (i >= 100) throw new Error(`redis-server did not start on port ${port}`);
      await Bun.sleep(50);
    } finally {
      probe.close();
    }
  }
}

/** With a password, the server requires it (requirepass) and url carries it (redis://:password@…). */
export async function startRedis(opts: { password?: string } = {}): Promise<TestRedis> {
  const port = await freePort();
  let proc = spawnRedis(port, opts.password);
  const url = opts.password === undefined ? `redis://127.0.0.1:${port}` : `redis://:${encodeURIComponent(opts.password)}@127.0.0.1:${port}`;
  const clients: RedisClient[] = [];
  await untilAnswering(url, port);
  return {
    url,
    port,
    pause() {
      proc.kill("SIGSTOP");
    },
    resume() {
      proc.kill("SIGCONT");
    },
    async restart() {
      proc.kill("SIGKILL");
      await proc.exited;
      proc = spawnRedis(port, opts.password);
      await untilAnswering(url, port);
    },
    client() {
      const c = new RedisClient(url, { connectionTimeout: 1000 });
      clients.push(c);
      return c;
    },
    get pid() {
      return proc.pid;
    },
    async stop() {
      for (const c of clients) c.close();
      proc.kill("SIGCONT");
      proc.kill();
      await proc.exited;
    },
  };
}
