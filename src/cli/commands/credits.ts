/** `atelier credits grant`: adds credits to a user's balance, recorded in the ledger as the CLI's. */
import { COMMON_HELP, parseCommand, positiveInteger, UsageError } from "../args";
import { configWithoutUpstreamSecrets, requireUserByEmail, withExistingStore, type Io } from "../shared";
import { MAX_CREDIT_GRANT } from "../../core/limits";

const USAGE = `Usage: atelier credits grant <email> <N> [--note TEXT]

${COMMON_HELP}`;

export async function creditsCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { note: { type: "string" } }, USAGE);
  const [sub, email, amount] = positionals;
  if (values.help) return io.out(USAGE), 0;
  if (!sub) return io.err(USAGE), 2;
  if (sub !== "grant") throw new UsageError(`unknown command: credits ${sub}\n\n${USAGE}`);
  if (!email || amount === undefined || positionals.length > 3) throw new UsageError(`credits grant takes an email and an amount\n\n${USAGE}`);
  const n = positiveInteger("N", amount, false, MAX_CREDIT_GRANT);
  return withExistingStore(configWithoutUpstreamSecrets(values), async (store) => {
    const u = await requireUserByEmail(store, email);
    const balance = await store.credits.grant(u.id, n, Date.now(), values.note, "cli");
    io.out(`granted ${n} credit${n === 1 ? "" : "s"} to ${u.email}; balance ${balance}`);
    return 0;
  });
}
