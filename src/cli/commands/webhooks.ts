/**
 * `atelier webhooks forget-secrets --yes`: the way out when the key that sealed the webhook
 * signing secrets is lost for good (core/webhooksKeyCheck: a server refuses to start with a
 * key that cannot open them). Drops every stored secret and the key's check value; the next
 * secret sealed, under whatever key the server then has, makes that key the database's.
 */
import { CliError, COMMON_HELP, parseCommand, UsageError } from "../args";
import { configWithoutUpstreamSecrets, withExistingStore, type Io } from "../shared";

const USAGE = `Usage: atelier webhooks forget-secrets --yes [--force]

  Drops every user's webhook signing secret (and a rotation's previous one) from the database,
  for when the key that sealed them ([webhooks] secret_key, or data_dir/webhook-secrets.key) is
  lost. Users then make new secrets on the workbench's Webhooks page (and give them to their
  receivers); until they do, their deliveries fail and are retried on the usual schedule.
  Refused while a server runs on the database (--force: it is known to be gone).

${COMMON_HELP}`;

export async function webhooksCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { yes: { type: "boolean" }, force: { type: "boolean" } }, USAGE);
  const [sub] = positionals;
  if (values.help) return io.out(USAGE), 0;
  if (!sub) return io.err(USAGE), 2;
  if (sub !== "forget-secrets") throw new UsageError(`unknown command: webhooks ${sub}\n\n${USAGE}`);
  if (positionals.length > 1) throw new UsageError(`webhooks forget-secrets takes no arguments\n\n${USAGE}`);
  if (!values.yes) throw new CliError("this drops every user's webhook signing secret; run it again with --yes to go ahead");
  const config = configWithoutUpstreamSecrets(values);
  return withExistingStore(config, async (store) => {
    // A running server holds the key the secrets were sealed with and would go on sealing and
    // signing with it, while one started after this would seal with its own.
    const live = await store.instances.live(Date.now(), config.instance.lease_ms);
    if (live.length > 0 && !values.force) {
      const who = live.map((i) => `${i.id}${i.host ? ` on ${i.host}` : ""}`).join(", ");
      throw new CliError(`${live.length} server${live.length === 1 ? " is" : "s are"} running on this database (${who}): stop ${live.length === 1 ? "it" : "them"} first, or add --force if ${live.length === 1 ? "it is" : "they are"} gone (a stopped server counts as running for [instance] lease_ms)`);
    }
    const n = await store.webhooks.forgetSecrets();
    io.out(`forgot the signing secrets of ${n} webhook endpoint${n === 1 ? "" : "s"}; their users make new ones on the workbench's Webhooks page`);
    return 0;
  });
}
