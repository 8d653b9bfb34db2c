/**
 * A loopback TCP proxy in front of PostgreSQL that loses one transaction's COMMIT on the way,
 * the way a network blip or a pooler restart does: the client's connection breaks around its
 * COMMIT, and the client cannot tell whether the transaction committed. Armed with a marker
 * (a piece of one statement's text), it acts on the first COMMIT sent on a connection after a
 * message containing the marker:
 * - "reply": the COMMIT reaches the server (it commits), its answer never comes back;
 * - "never": the COMMIT is never sent (the server rolls the transaction back);
 * - "late":  the client's side breaks at once, and the COMMIT reaches the server `lateMs` later
 *   (the transaction stays open, holding its row locks, in between).
 * Statement texts travel only when a connection first prepares them (the client prepares by
 * text, per connection): arm it before the statement's first run on the server.
 */
import type { Socket, TCPSocketListener } from "bun";

export type LostCommitMode = "reply" | "never" | "late";

export interface LostCommitProxy {
  /** `url` (a PostgreSQL URL) with its port pointed at the proxy. */
  urlFor(url: string): string;
  /** Loses the next COMMIT of a transaction that sent `marker`, as `mode` says. */
  arm(marker: string, mode?: LostCommitMode, lateMs?: number): void;
  /** How many COMMITs it has lost so far. */
  readonly lost: number;
  stop(): void;
}

interface Pair {
  upstream: Socket<Pair> | null;
  client: Socket<Pair>;
  pending: Uint8Array[];
  /** The marker went through this connection: its next COMMIT is the one to lose. */
  marked: boolean;
  /** The server's answers are no longer passed on. */
  mute: boolean;
}

const COMMIT = Buffer.from("COMMIT");

export function startLostCommitProxy(targetPort: number, host = "127.0.0.1"): LostCommitProxy {
  let armed: { marker: Buffer; mode: LostCommitMode; lateMs: number } | null = null;
  let lost = 0;
  const pairs = new Set<Pair>();
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const later = (ms: number, fn: () => void) => {
    const t = setTimeout(() => (timers.delete(t), fn()), ms);
    timers.add(t);
  };
  const send = (pair: Pair, chunk: Uint8Array) => {
    if (pair.upstream) pair.upstream.write(chunk);
    else pair.pending.push(new Uint8Array(chunk));
  };

  const listener: TCPSocketListener<Pair> = Bun.listen<Pair>({
    hostname: host,
    port: 0,
    socket: {
      open(client) {
        const pair: Pair = { upstream: null, client, pending: [], marked: false, mute: false };
        client.data = pair;
        pairs.add(pair);
        void Bun.connect<Pair>({
          hostname: host,
          port: targetPort,
          data: pair,
          socket: {
            open(upstream) {
              pair.upstream = upstream;
              for (const chunk of pair.pending) upstream.write(chunk);
              pair.pending = [];
            },
            data(_upstream, chunk) {
              if (!pair.mute) pair.client.write(chunk);
            },
            close() {
              pair.client.end();
            },
            error() {
              pair.client.end();
            },
          },
        }).catch(() => client.end());
      },
      data(client, chunk) {
        const pair = client.data;
        const bytes = Buffer.from(chunk);
        if (pair.mute) return; // the client is being cut off: nothing more of it reaches the server
        if (armed && !pair.marked && bytes.includes(armed.marker)) pair.marked = true;
        if (!(armed && pair.marked && bytes.includes(COMMIT))) return send(pair, chunk);
        const { mode, lateMs } = armed;
        armed = null;
        lost++;
        pair.mute = true;
        if (mode === "reply") {
          send(pair, chunk);
          // Time for the server to commit before the client learns its connection broke.
          later(50, () => client.terminate());
          later(500, () => pair.upstream?.end());
        } else if (mode === "never") {
          client.terminate();
          pair.upstream?.end();
        } else {
          client.terminate();
          later(lateMs, () => send(pair, chunk));
          later(lateMs + 500, () => pair.upstream?.end());
        }
      },
      close(client) {
        pairs.delete(client.data);
        // A connection being cut keeps its server side until its COMMIT's fate is played out.
        if (!client.data.mute) client.data.upstream?.end();
      },
      error(client) {
        pairs.delete(client.data);
        if (!client.data.mute) client.data.upstream?.end();
      },
    },
  });

  return {
    urlFor(url: string) {
      const u = new URL(url);
      u.port = String(listener.port);
      return u.toString();
    },
    arm(marker, mode = "reply", lateMs = 1_000) {
      for (const pair of pairs) pair.marked = false;
      armed = { marker: Buffer.from(marker), mode, lateMs };
    },
    get lost() {
      return lost;
    },
    stop() {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      listener.stop(true);
    },
  };
}
