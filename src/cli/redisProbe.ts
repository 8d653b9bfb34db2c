/**
 * `atelier doctor`'s look at [redis] url: the server's image and chat gates (and /readyz) need
 * Redis, so doctor asks it the same thing /readyz does (PING), bounded in time, and says why
 * not without the URL's password. Bun's client reports a refused connection, a refused
 * password and a TLS mismatch alike ("Connection closed"): a plain TCP connection to the same
 * address tells the first apart from the others.
 */
import { RedisClient } from "bun";
import { connect } from "node:net";
import { serverAddress, withheldIfHoldsPassword } from "../core/serverUrls";

/** `redis://host:port/db` of a Redis URL: where it is, without the user and password. */
export function describeRedisUrl(url: string): string {
  return serverAddress(url, true) ?? "(an unparsable redis:// URL)";
}

const LATE = Symbol("late");

export type RedisProbe = { ok: true; ms: number } | { ok: false; why: string };

/** PING over a fresh connection; the whole of it (connecting, authenticating, the answer) within timeoutMs. */
export async function probeRedis(url: string, timeoutMs: number): Promise<RedisProbe> {
  const started = performance.now();
  const client = new RedisClient(url, { connectionTimeout: timeoutMs, autoReconnect: false });
  let timer: ReturnType<typeof setTimeout> | undefined;
  // A frozen server accepts the connection and never answers: only a timer of our own ends that.
  const late = new Promise<typeof LATE>((resolve) => (timer = setTimeout(() => resolve(LATE), timeoutMs)));
  try {
    const answer: unknown = await Promise.race([client.connect().then(() => client.send("PING", [])), late]);
    if (answer === LATE) return { ok: false, why: `no answer within ${timeoutMs} ms` };
    if (answer !== "PONG") return { ok: false, why: withheldIfHoldsPassword(`PING answered ${String(answer).slice(0, 80)}, not PONG`, url) };
    return { ok: true, ms: Math.round(performance.now() - started) };
  } catch (e) {
    return { ok: false, why: withheldIfHoldsPassword(await whyNot(url, e, timeoutMs), url) };
  } finally {
    clearTimeout(timer);
    client.close();
  }
}

async function whyNot(url: string, e: unknown, timeoutMs: number): Promise<string> {
  const err = e as { code?: unknown; message?: unknown };
  const said = `${String(err.message ?? e)}${typeof err.code === "string" ? ` (${err.code})` : ""}`;
  // The client's own connection timer, running out with ours: the same answer, whichever ends first.
  if (err.code === "ERR_REDIS_CONNECTION_TIMEOUT") return `no answer within ${timeoutMs} ms`;
  // Anything but a closed connection is Redis's own refusal (e.g. "DB index is out of range"): its words say it.
  if (err.code !== "ERR_REDIS_CONNECTION_CLOSED") return said;
  const tcp = await tcpConnects(url, timeoutMs);
  if (tcp !== null) return `unreachable: ${tcp}`;
  return `the port accepts connections, but Redis closed this one: ${said}; check the user and password in the URL, and redis:// against rediss:// (TLS)`;
}

/** null when a TCP connection to the URL's host and port opens within timeoutMs, else why not (ECONNREFUSED, ENOTFOUND, …). */
function tcpConnects(url: string, timeoutMs: number): Promise<string | null> {
  let host: string;
  let port: number;
  try {
    const u = new URL(url);
    host = u.hostname.replace(/^\[(.*)\]$/, "$1");
    port = u.port ? Number(u.port) : 6379;
  } catch {
    return Promise.resolve("not a URL");
  }
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (why: string | null) => (socket.destroy(), resolve(why));
    socket.setTimeout(timeoutMs, () => done(`no TCP connection within ${timeoutMs} ms`));
    socket.once("connect", () => done(null));
    socket.once("error", (e: NodeJS.ErrnoException) => done(e.code ?? e.message));
  });
}
