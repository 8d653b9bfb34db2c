/**
 * The plumbing of the loopback TCP proxies tests put in front of a real server (tcpProxy,
 * lostCommit): each client connection is relayed to its own connection to the server, bytes the
 * client sends before that one is open are kept and sent once it is. What a proxy does with the
 * bytes (pass them, hold them, lose them) and with a closed side is its hooks' business; by
 * default bytes pass and a side's close ends the other.
 */
import type { Socket, TCPSocketListener } from "bun";

/** One client connection and its connection to the server, with the proxy's own state `S`. */
export interface Relay<S> {
  readonly client: Socket<Relay<S>>;
  upstream: Socket<Relay<S>> | null;
  readonly state: S;
  /** Bytes for the server: written, or kept until its connection is open. */
  toServer(chunk: Uint8Array): void;
}

export interface RelayHooks<S> {
  /** The state of a new connection. */
  state(): S;
  /** A client's bytes (default: to the server). */
  fromClient?(relay: Relay<S>, chunk: Uint8Array): void;
  /** The server's bytes (default: to the client). */
  fromServer?(relay: Relay<S>, chunk: Uint8Array): void;
  /** The client's side closed or failed (default: end the server's side). */
  clientGone?(relay: Relay<S>): void;
}

export interface RelayListener<S> {
  readonly port: number;
  /** The relays whose client is still connected. */
  readonly relays: ReadonlySet<Relay<S>>;
  /** Stops listening; with `terminate`, also cuts every relay's two sides at once. */
  stop(terminate?: boolean): void;
}

/** Listens on `host`:`port` (0: any free port) and relays each connection to `host`:`targetPort`. */
export function listenRelay<S>(host: string, port: number, targetPort: number, hooks: RelayHooks<S>): RelayListener<S> {
  const relays = new Set<Relay<S>>();
  const upstreams = new Set<Socket<Relay<S>>>();
  const listener: TCPSocketListener<Relay<S>> = Bun.listen<Relay<S>>({
    hostname: host,
    port,
    socket: {
      open(client) {
        const pending: Uint8Array[] = [];
        const relay: Relay<S> = {
          client,
          upstream: null,
          state: hooks.state(),
          toServer(chunk) {
            if (relay.upstream) relay.upstream.write(chunk);
            else pending.push(new Uint8Array(chunk));
          },
        };
        client.data = relay;
        relays.add(relay);
        const serverGone = (upstream: Socket<Relay<S>>) => {
          upstreams.delete(upstream);
          client.end();
        };
        void Bun.connect<Relay<S>>({
          hostname: host,
          port: targetPort,
          data: relay,
          socket: {
            open(upstream) {
              upstreams.add(upstream);
              relay.upstream = upstream;
              for (const chunk of pending.splice(0)) upstream.write(chunk);
            },
            data(_upstream, chunk) {
              if (hooks.fromServer) hooks.fromServer(relay, chunk);
              else client.write(chunk);
            },
            close: serverGone,
            error: serverGone,
          },
        }).catch(() => client.end());
      },
      data(client, chunk) {
        if (hooks.fromClient) hooks.fromClient(client.data, chunk);
        else client.data.toServer(chunk);
      },
      close: clientGone,
      error: clientGone,
    },
  });
  function clientGone(client: Socket<Relay<S>>) {
    const relay = client.data;
    relays.delete(relay);
    if (hooks.clientGone) hooks.clientGone(relay);
    else relay.upstream?.end();
  }
  return {
    port: listener.port,
    relays,
    stop(terminate = false) {
      listener.stop(true);
      if (!terminate) return;
      for (const relay of relays) relay.client.terminate();
      for (const upstream of upstreams) upstream.terminate();
      relays.clear();
      upstreams.clear();
    },
  };
}
