/**
 * A loopback TCP proxy in front of a real server (PostgreSQL, Redis) that a test can cut and
 * restore: `cut()` drops every open connection and refuses new ones (as a dead server or a
 * broken network would), `restore()` listens again on the same port.
 */
import type { Socket, TCPSocketListener } from "bun";

export interface TcpProxy {
  port: number;
  cut(): void;
  restore(): void;
  stop(): void;
}

interface Pair {
  upstream: Socket<Pair> | null;
  client: Socket<Pair>;
  pending: Uint8Array[];
}

export function startTcpProxy(targetPort: number, host = "127.0.0.1"): TcpProxy {
  const open = new Set<Socket<Pair>>();
  let listener: TCPSocketListener<Pair> | null = null;
  let port = 0;

  const listen = () => {
    listener = Bun.listen<Pair>({
      hostname: host,
      port,
      socket: {
        open(client) {
          open.add(client);
          const pair: Pair = { upstream: null, client, pending: [] };
          client.data = pair;
          void Bun.connect<Pair>({
            hostname: host,
            port: targetPort,
            data: pair,
            socket: {
              open(upstream) {
                open.add(upstream);
                pair.upstream = upstream;
                for (const chunk of pair.pending) upstream.write(chunk);
                pair.pending = [];
              },
              data(_upstream, chunk) {
                pair.client.write(chunk);
              },
              close(upstream) {
                open.delete(upstream);
                pair.client.end();
              },
              error(upstream) {
                open.delete(upstream);
                pair.client.end();
              },
            },
          }).catch(() => client.end());
        },
        data(client, chunk) {
          const pair = client.data;
          if (pair.upstream) pair.upstream.write(chunk);
          else pair.pending.push(new Uint8Array(chunk));
        },
        close(client) {
          open.delete(client);
          client.data?.upstream?.end();
        },
        error(client) {
          open.delete(client);
          client.data?.upstream?.end();
        },
      },
    });
    port = listener.port;
  };
  listen();

  const cut = () => {
    listener?.stop(true);
    listener = null;
    for (const s of open) s.terminate();
    open.clear();
  };
  return {
    get port() {
      return port;
    },
    cut,
    restore() {
      if (!listener) listen();
    },
    stop: cut,
  };
}
