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
import { listenRelay, type Relay } from "./tcpRelay";

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

interface ConnectionState {
  /** The marker went through this connection: its next COMMIT is the one to lose. */
  marked: boolean;
  /** The server's answers are no longer passed on, nor the client's bytes to it. */
  mute: boolean;
}

const COMMIT = Buffer.from("COMMIT");

export function startLostCommitProxy(targetPort: number, host = "127.0.0.1"): LostCommitProxy {
  let armed: { marker: Buffer; mode: LostCommitMode; lateMs: number } | null = null;
  let lost = 0;
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const later = (ms: number, fn: () => void) => {
    const t = setTimeout(() => (timers.delete(t), fn()), ms);
    timers.add(t);
  };

  /** The client's bytes: passed on, unless they hold the armed COMMIT. */
  const fromClient = (relay: Relay<ConnectionState>, chunk: Uint8Array) => {
    const { state, client } = relay;
    const bytes = Buffer.from(chunk);
    if (state.mute) return; // the client is being cut off: nothing more of it reaches the server
    if (armed && !state.marked && bytes.includes(armed.marker)) state.marked = true;
    if (!(armed && state.marked && bytes.includes(COMMIT))) return relay.toServer(chunk);
    const { mode, lateMs } = armed;
    armed = null;
    lost++;
    state.mute = true;
    if (mode === "reply") {
      relay.toServer(chunk);
      // Time for the server to commit before the client learns its connection broke.
      later(50, () => client.terminate());
      later(500, () => relay.upstream?.end());
    } else if (mode === "never") {
      client.terminate();
      relay.upstream?.end();
    } else {
      client.terminate();
      later(lateMs, () => relay.toServer(chunk));
      later(lateMs + 500, () => relay.upstream?.end());
    }
  };

  const listener = listenRelay<ConnectionState>(host, 0, targetPort, {
    state: () => ({ marked: false, mute: false }),
    fromClient,
    fromServer(relay, chunk) {
      if (!relay.state.mute) relay.client.write(chunk);
    },
    // A connection being cut keeps its server side until its COMMIT's fate is played out.
    clientGone(relay) {
      if (!relay.state.mute) relay.upstream?.end();
    },
  });

  return {
    urlFor(url: string) {
      const u = new URL(url);
      u.port = String(listener.port);
      return u.toString();
    },
    arm(marker, mode = "reply", lateMs = 1_000) {
      for (const relay of listener.relays) relay.state.marked = false;
      armed = { marker: Buffer.from(marker), mode, lateMs };
    },
    get lost() {
      return lost;
    },
    stop() {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      listener.stop();
    },
  };
}
