/** `atelier healthcheck`: for container HEALTHCHECKs on images without curl (the distroless one). */
import { COMMON_HELP, noPositionals, parseCommand } from "../args";
import { configWithoutUpstreamSecrets, type Io } from "../shared";

const USAGE = `Usage: atelier healthcheck [--url URL]

Exits 0 when the server answers GET /healthz with 200 within 5 seconds, 1 otherwise.

  --url URL   base URL to check (default: http://127.0.0.1:<port> from the configuration)

${COMMON_HELP}`;

export async function healthcheckCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { url: { type: "string" } }, USAGE);
  if (values.help) return io.out(USAGE), 0;
  noPositionals("healthcheck", positionals, USAGE);
  const base = values.url ?? localServerUrl(configWithoutUpstreamSecrets(values).server);
  try {
    const res = await fetch(new URL("/healthz", base), { signal: AbortSignal.timeout(5000) });
    if (res.status === 200) return io.out(`ok ${base}`), 0;
    io.err(`atelier healthcheck: ${base}/healthz answered ${res.status}`);
  } catch (e) {
    io.err(`atelier healthcheck: ${base}/healthz: ${(e as Error).message}`);
  }
  return 1;
}

/** The configured server as seen from its own machine: a wildcard address is reached on loopback, an IPv6 one in brackets. */
function localServerUrl({ host, port }: { host: string; port: number }): string {
  const local = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
  return `http://${local}:${port}`;
}
