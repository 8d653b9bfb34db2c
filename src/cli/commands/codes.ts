/** `atelier codes create`: a batch of redemption codes, printed once as CSV (only their hashes are kept). */
import { COMMON_HELP, parseCommand, positiveInteger, UsageError } from "../args";
import { configWithoutUpstreamSecrets, withExistingStore, type Io } from "../shared";
import { BatchRejected, RedemptionCodes, batchCsv } from "../../core/redemptionCodes";
import { MAX_CODE_BATCH_SIZE, MAX_CODE_EXPIRY_DAYS, MAX_CREDIT_GRANT } from "../../core/limits";

const USAGE = `Usage: atelier codes create --credits N --count M [--expires-days D] [--name TEXT]

Prints the batch as CSV (code,credits,expires_at,batch_id,batch_name) on stdout: the only copy
of the codes. Without --expires-days they never expire.

${COMMON_HELP}`;

export async function codesCommand(argv: string[], io: Io): Promise<number> {
  const spec = { credits: { type: "string" }, count: { type: "string" }, "expires-days": { type: "string" }, name: { type: "string" } } as const;
  const { values, positionals } = parseCommand(argv, spec, USAGE);
  if (values.help) return io.out(USAGE), 0;
  const [sub] = positionals;
  if (!sub) return io.err(USAGE), 2;
  if (sub !== "create" || positionals.length > 1) throw new UsageError(`unknown command: codes ${positionals.join(" ")}\n\n${USAGE}`);
  const credits = positiveInteger("--credits", values.credits, false, MAX_CREDIT_GRANT);
  const count = positiveInteger("--count", values.count, false, MAX_CODE_BATCH_SIZE);
  const days = values["expires-days"] === undefined ? null : positiveInteger("--expires-days", values["expires-days"], false, MAX_CODE_EXPIRY_DAYS);
  return withExistingStore(configWithoutUpstreamSecrets(values), async (store) => {
    try {
      const created = await new RedemptionCodes(store.redemptions, Date.now).createBatch({ name: values.name ?? `cli ${new Date().toISOString().slice(0, 10)}`, credits, count, expiresInDays: days, createdBy: "cli" });
      io.out(batchCsv(created).trimEnd());
      return 0;
    } catch (e) {
      if (e instanceof BatchRejected) throw new UsageError(e.message);
      throw e;
    }
  });
}
