/** `atelier user add | list | password`: the accounts people sign in with and keys belong to. */
import { addUser, hashPassword } from "../../core/accounts";
import { openStore } from "../../store/open";
import { COMMON_HELP, noPositionals, parseCommand, positiveInteger, UsageError } from "../args";
import { configWithoutUpstreamSecrets, isoTimeOrDash, requireUserByEmail, tabSeparated, withExistingStore, type DataOptions, type Io } from "../shared";
import { MAX_CREDIT_GRANT } from "../../core/limits";

const USAGE = `Usage:
  atelier user add <email> [--password P] [--admin] [--credits N]
  atelier user list
  atelier user password <email> --password P   (ends the user's workbench sessions)

${COMMON_HELP}`;

const OPTIONS = { password: { type: "string" }, admin: { type: "boolean" }, credits: { type: "string" } } as const;

interface Values extends DataOptions {
  password?: string;
  admin?: boolean;
  credits?: string;
}

export async function userCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, OPTIONS, USAGE);
  const [sub, email] = positionals;
  if (values.help) return io.out(USAGE), 0;
  if (!sub) return io.err(USAGE), 2;
  if (sub === "add") {
    if (!email || positionals.length > 2) throw new UsageError(`user add takes one email\n\n${USAGE}`);
    return userAdd(email, values, io);
  }
  if (sub === "list") {
    noPositionals("user list", positionals.slice(1), USAGE);
    return userList(values, io);
  }
  if (sub === "password") {
    if (!email || positionals.length > 2) throw new UsageError(`user password takes one email\n\n${USAGE}`);
    return userPassword(email, values, io);
  }
  throw new UsageError(`unknown command: user ${sub}\n\n${USAGE}`);
}

/** The one command besides `serve` that creates the database: the first user is how an install begins. */
async function userAdd(email: string, values: Values, io: Io): Promise<number> {
  const credits = values.credits === undefined ? 0 : positiveInteger("--credits", values.credits, true, MAX_CREDIT_GRANT);
  const config = configWithoutUpstreamSecrets(values);
  if (values.password !== undefined) checkPasswordLength(values.password, config.workbench.min_password_length);
  const store = await openStore(config);
  try {
    const row = await addUser(store, Date.now, {
      email,
      password: values.password,
      role: values.admin ? "admin" : "user",
      credits,
      actor: "cli",
    });
    io.out(`created ${row.role} ${row.email} (id ${row.id}) with ${row.credits} credits`);
    if (values.password === undefined) {
      io.out(`no password: ${row.email} can use API keys but cannot sign in to the workbench until \`atelier user password ${row.email} --password …\``);
    }
  } finally {
    await store.close();
  }
  return 0;
}

function userList(values: Values, io: Io): Promise<number> {
  return withExistingStore(configWithoutUpstreamSecrets(values), async (store) => {
    io.out(tabSeparated(["ID", "EMAIL", "ROLE", "CREDITS", "DISABLED", "CREATED"]));
    // A negative limit lists every user: the store pages by 1000 by default.
    for (const u of await store.users.list({ limit: -1 })) {
      io.out(tabSeparated([u.id, u.email, u.role, u.credits, u.disabled ? "yes" : "no", isoTimeOrDash(u.created_at)]));
    }
    return 0;
  });
}

async function userPassword(email: string, values: Values, io: Io): Promise<number> {
  const config = configWithoutUpstreamSecrets(values);
  if (values.password === undefined) throw new UsageError(`user password needs --password\n\n${USAGE}`);
  checkPasswordLength(values.password, config.workbench.min_password_length);
  // Hashed (argon2id, slow on purpose) before the database is opened: the store is held only for the writes.
  const hash = await hashPassword(values.password);
  return withExistingStore(config, async (store) => {
    const u = await requireUserByEmail(store, email);
    await store.users.setPasswordHash(u.id, hash);
    // Whoever knew the old password is signed out everywhere.
    await store.sessions.deleteForUser(u.id);
    io.out(`password set for ${u.email}; their workbench sessions were ended`);
    return 0;
  });
}

/** The workbench's own minimum, so a password the CLI sets is one the sign-in form would accept. */
function checkPasswordLength(password: string, min: number): void {
  if (password.length < min) throw new UsageError(`--password must be at least ${min} characters`);
}
