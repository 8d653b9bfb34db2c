/**
 * A loopback TCP proxy in front of a real server (PostgreSQL, Redis) that a test can cut and
 * restore: `cut()` drops every open connection and refuses new ones (as a dead server or a
 * broken network would), `restore()` listens again on the same port.
 */
import { listenRelay, type RelayListener } from "./tcpRelay";

export interface TcpProxy {
  port: number;
  cut(): void;
  restore(): void;
  stop(): void;
}

export function startTcpProxy(targetPort: number, host = "127.0.0.1"): TcpProxy {
  const listen = (port: number) => listenRelay(host, port, targetPort, { state: () => undefined });
  let relay: RelayListener<undefined> | null = listen(0);
  const port = relay.port;
  const cut = () => {
    relay?.stop(true);
    relay = null;
  };
  return {
    port,
    cut,
    restore() {
      relay ??= listen(port);
    },
    stop: cut,
  };
}
