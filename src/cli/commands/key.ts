/** `atelier key create | list | revoke`: a user's API keys. */
import { createKey } from "../../core/accounts";
import { hashApiKey, looksLikeApiKey } from "../../core/apiKeys";
import type { Store } from "../../store";
import { CliError, COMMON_HELP, parseCommand, UsageError } from "../args";
import { configWithoutUpstreamSecrets, isoTimeOrDash, requireUserByEmail, tabSeparated, withExistingStore, type Io } from "../shared";
import { MAX_KEY_NAME_CHARS } from "../../core/limits";

const USAGE = `Usage:
  atelier key create <email> [--name NAME]
  atelier key list <email>
  atelier key revoke <prefix or key>

${COMMON_HELP}`;

export async function keyCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { name: { type: "string" } }, USAGE);
  const [sub, arg] = positionals;
  if (values.help) return io.out(USAGE), 0;
  if (!sub) return io.err(USAGE), 2;
  if (!arg || positionals.length > 2) throw new UsageError(`key ${sub} takes one argument\n\n${USAGE}`);
  return withExistingStore(configWithoutUpstreamSecrets(values), async (store) => {
    if (sub === "create") return keyCreate(store, arg, values.name ?? "cli", io);
    if (sub === "list") return keyList(store, arg, io);
    if (sub === "revoke") return keyRevoke(store, arg, io);
    throw new UsageError(`unknown command: key ${sub}\n\n${USAGE}`);
  });
}

/** The secret is printed alone on the last line, so scripts take it with `tail -1`; it is never shown again. */
async function keyCreate(store: Store, email: string, name: string, io: Io): Promise<number> {
  const u = await requireUserByEmail(store, email);
  if (name.length === 0 || name.length > MAX_KEY_NAME_CHARS) throw new UsageError(`--name must be 1 to ${MAX_KEY_NAME_CHARS} characters`);
  const { key } = await createKey(store, Date.now, u.id, name);
  io.out(`created key ${key.prefix} (${name}) for ${u.email}; it is shown only once:`);
  io.out(key.secret);
  return 0;
}

async function keyList(store: Store, email: string, io: Io): Promise<number> {
  const u = await requireUserByEmail(store, email);
  io.out(tabSeparated(["PREFIX", "NAME", "CREATED", "LAST USED", "STATUS"]));
  for (const k of await store.keys.listForUser(u.id)) {
    io.out(tabSeparated([k.prefix, k.name, isoTimeOrDash(k.created_at), isoTimeOrDash(k.last_used_at), k.revoked_at ? "revoked" : "active"]));
  }
  return 0;
}

/** Takes the prefix that `key list` shows, or the whole key: someone revoking a leaked key has it at hand. */
async function keyRevoke(store: Store, prefixOrKey: string, io: Io): Promise<number> {
  if (looksLikeApiKey(prefixOrKey)) {
    // A whole key is matched by its hash, the only form stored.
    const owner = await store.keys.ownerByHash(hashApiKey(prefixOrKey));
    if (!owner) throw new CliError("no such key (it was never issued by this atelier)");
    if (!(await store.keys.revoke(owner.key_id, Date.now()))) throw new CliError(`that key is already revoked`);
    io.out(`revoked ${owner.key_prefix} of ${owner.email}`);
    return 0;
  }
  const k = await store.keys.byPrefix(prefixOrKey);
  if (!k) throw new CliError(`no key with prefix ${prefixOrKey} (give the prefix that \`atelier key list\` shows, or the whole key)`);
  if (!(await store.keys.revoke(k.id, Date.now()))) throw new CliError(`key ${prefixOrKey} is already revoked`);
  io.out(`revoked ${k.prefix}`);
  return 0;
}
