/**
 * `atelier upstreams [--json]` and `atelier upstreams enable <upstream> <account>`: the words on
 * the command line; what they show and change is in ../upstreams.ts.
 */
import { COMMON_HELP, parseCommand, UsageError } from "../args";
import { configFrom, withExistingStore, type Io } from "../shared";
import { enableUpstreamAccount, showUpstreams } from "../upstreams";

const USAGE = `Usage:
  atelier upstreams [--json]
  atelier upstreams enable <upstream> <account>

In-flight counts and cooldowns are the running server's last snapshot (AS OF); disabled flags are current.

${COMMON_HELP}`;

export function upstreamsCommand(argv: string[], io: Io): Promise<number> | number {
  const { values, positionals } = parseCommand(argv, { json: { type: "boolean" } }, USAGE);
  if (values.help) return io.out(USAGE), 0;
  const [sub, upstreamId, accountId] = positionals;
  const config = configFrom(values);
  return withExistingStore(config, async (store) => {
    if (sub === undefined) {
      for (const line of await showUpstreams(config, store, Date.now(), values.json === true)) io.out(line);
      return 0;
    }
    if (sub !== "enable") throw new UsageError(`unknown command: upstreams ${sub}\n\n${USAGE}`);
    if (!upstreamId || !accountId || positionals.length > 3) throw new UsageError(`upstreams enable takes an upstream id and an account id\n\n${USAGE}`);
    io.out(await enableUpstreamAccount(config, store, upstreamId, accountId));
    return 0;
  });
}
