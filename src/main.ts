#!/usr/bin/env bun
/**
 * The one binary: `atelier serve | user | key | credits | openapi`. Every command takes
 * --config and --data and works while a server runs on the same data directory.
 */
import { createApp, createServices } from "./app";
import { CliError, COMMON_HELP, MAX_CREDITS, noPositionals, parseCommand, positiveInteger, UsageError } from "./cli/args";
import { configFrom, isoTimeOrDash, requireUserByEmail, tabSeparated, withExistingStore, type Io } from "./cli/shared";
import { ConfigError, type Config } from "./config";
import { AccountError, addUser, createKey, hashPassword } from "./core/accounts";
import { hashApiKey, looksLikeApiKey } from "./core/apiKeys";
import { createLogger, silentLogger } from "./logger";
import { startServer } from "./server";
import { enableUpstreamAccount, showUpstreams } from "./cli/upstreams";
import { createStore } from "./store";
import { DatabaseTooNewError, latestVersion, openDatabase } from "./store/database";
import { SessionStore } from "./store/sessions";
import { EmailTakenError } from "./store/users";

const USAGE = `atelier — OpenAI-compatible image generation and chat in one binary

Usage: atelier <command> [options]

Commands:
  serve                                   run the HTTP server
  user add <email> [--password P] [--admin] [--credits N]
  user list
  user password <email> --password P     set or replace the workbench password
  credits grant <email> <N> [--note TEXT]
  key create <email> [--name NAME]        prints the full key alone on the last line
  key list <email>
  key revoke <prefix or key>
  upstreams [--json]                      upstream accounts: in-flight, capacity, state, recent failures
  upstreams enable <upstream> <account>   re-enable an account disabled after a 401/403
  openapi                                 print the OpenAPI document
  healthcheck                             exit 0 if the local server answers /healthz (for Docker)

${COMMON_HELP}`;

async function serve(argv: string[], io: Io): Promise<number> {
  const usage = `Usage: atelier serve [--port N] [--host ADDR]\n\n  --port N      port (or ATELIER_PORT; default 8080)\n  --host ADDR   address (or ATELIER_HOST; default 0.0.0.0)\n\n${COMMON_HELP}`;
  const { values, positionals } = parseCommand(argv, { port: { type: "string" }, host: { type: "string" } }, usage);
  if (values.help) return io.out(usage), 0;
  noPositionals("serve", positionals, usage);
  const port = values.port === undefined ? undefined : positiveInteger("--port", values.port, true);
  const config = configFrom(values, { port, host: values.host });
  const logger = createLogger();
  const server = await startServer(config, logger);
  let signalled = false;
  const stop = (signal: string) => {
    if (signalled) return;
    signalled = true;
    logger.info("signal received", { signal });
    server.stop().then(() => process.exit(0));
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  return new Promise<number>(() => {}); // runs until a signal
}

async function user(argv: string[], io: Io): Promise<number> {
  const usage = `Usage:\n  atelier user add <email> [--password P] [--admin] [--credits N]\n  atelier user list\n  atelier user password <email> --password P   (ends the user's workbench sessions)\n\n${COMMON_HELP}`;
  const { values, positionals } = parseCommand(
    argv,
    { password: { type: "string" }, admin: { type: "boolean" }, credits: { type: "string" } },
    usage,
  );
  const [sub, email] = positionals;
  if (values.help) return io.out(usage), 0;
  if (!sub) return io.err(usage), 2;
  if (sub === "add") {
    if (!email || positionals.length > 2) throw new UsageError(`user add takes one email\n\n${usage}`);
    const credits = values.credits === undefined ? 0 : positiveInteger("--credits", values.credits, true, MAX_CREDITS);
    const config = configFrom(values);
    if (values.password !== undefined && values.password.length < config.workbench.min_password_length) {
      throw new UsageError(`--password must be at least ${config.workbench.min_password_length} characters`);
    }
    const store = createStore(openDatabase(config.server.data_dir), latestVersion());
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
      store.close();
    }
    return 0;
  }
  if (sub === "list") {
    noPositionals("user list", positionals.slice(1), usage);
    return withExistingStore(configFrom(values), (store) => {
      io.out(tabSeparated(["ID", "EMAIL", "ROLE", "CREDITS", "DISABLED", "CREATED"]));
      // limit -1 is SQLite's "no limit": the store pages by 1000 by default.
      for (const u of store.users.list({ limit: -1 })) {
        io.out(tabSeparated([u.id, u.email, u.role, u.credits, u.disabled ? "yes" : "no", isoTimeOrDash(u.created_at)]));
      }
      return 0;
    });
  }
  if (sub === "password") {
    if (!email || positionals.length > 2) throw new UsageError(`user password takes one email\n\n${usage}`);
    const config = configFrom(values);
    if (values.password === undefined) throw new UsageError(`user password needs --password\n\n${usage}`);
    if (values.password.length < config.workbench.min_password_length) {
      throw new UsageError(`--password must be at least ${config.workbench.min_password_length} characters`);
    }
    const hash = await hashPassword(values.password);
    return withExistingStore(configFrom(values), (store) => {
      const u = requireUserByEmail(store, email);
      store.users.setPasswordHash(u.id, hash);
      // Whoever knew the old password is signed out everywhere.
      new SessionStore(store.db).deleteForUser(u.id);
      io.out(`password set for ${u.email}; their workbench sessions were ended`);
      return 0;
    });
  }
  throw new UsageError(`unknown command: user ${sub}\n\n${usage}`);
}

function credits(argv: string[], io: Io): number {
  const usage = `Usage: atelier credits grant <email> <N> [--note TEXT]\n\n${COMMON_HELP}`;
  const { values, positionals } = parseCommand(argv, { note: { type: "string" } }, usage);
  const [sub, email, amount] = positionals;
  if (values.help) return io.out(usage), 0;
  if (!sub) return io.err(usage), 2;
  if (sub !== "grant") throw new UsageError(`unknown command: credits ${sub}\n\n${usage}`);
  if (!email || amount === undefined || positionals.length > 3) throw new UsageError(`credits grant takes an email and an amount\n\n${usage}`);
  const n = positiveInteger("N", amount, false, MAX_CREDITS);
  return withExistingStore(configFrom(values), (store) => {
    const u = requireUserByEmail(store, email);
    const balance = store.credits.grant(u.id, n, Date.now(), values.note, "cli");
    io.out(`granted ${n} credit${n === 1 ? "" : "s"} to ${u.email}; balance ${balance}`);
    return 0;
  });
}

function key(argv: string[], io: Io): number {
  const usage = `Usage:\n  atelier key create <email> [--name NAME]\n  atelier key list <email>\n  atelier key revoke <prefix or key>\n\n${COMMON_HELP}`;
  const { values, positionals } = parseCommand(argv, { name: { type: "string" } }, usage);
  const [sub, arg] = positionals;
  if (values.help) return io.out(usage), 0;
  if (!sub) return io.err(usage), 2;
  if (!arg || positionals.length > 2) throw new UsageError(`key ${sub} takes one argument\n\n${usage}`);
  return withExistingStore(configFrom(values), (store) => {
    if (sub === "create") {
      const u = requireUserByEmail(store, arg);
      const name = values.name ?? "cli";
      if (name.length === 0 || name.length > 100) throw new UsageError("--name must be 1 to 100 characters");
      const { key: k } = createKey(store, Date.now, u.id, name);
      io.out(`created key ${k.prefix} (${name}) for ${u.email}; it is shown only once:`);
      io.out(k.secret);
      return 0;
    }
    if (sub === "list") {
      const u = requireUserByEmail(store, arg);
      io.out(tabSeparated(["PREFIX", "NAME", "CREATED", "LAST USED", "STATUS"]));
      for (const k of store.keys.listForUser(u.id)) {
        io.out(tabSeparated([k.prefix, k.name, isoTimeOrDash(k.created_at), isoTimeOrDash(k.last_used_at), k.revoked_at ? "revoked" : "active"]));
      }
      return 0;
    }
    if (sub === "revoke") {
      // The whole key works too (someone revoking a leaked key has it at hand); it is matched by hash.
      if (looksLikeApiKey(arg)) {
        const owner = store.keys.ownerByHash(hashApiKey(arg));
        if (!owner) throw new CliError("no such key (it was never issued by this atelier)");
        if (!store.keys.revoke(owner.key_id, Date.now())) throw new CliError(`that key is already revoked`);
        io.out(`revoked ${store.keys.listForUser(owner.user_id).find((k) => k.id === owner.key_id)?.prefix ?? "the key"} of ${owner.email}`);
        return 0;
      }
      const k = store.keys.byPrefix(arg);
      if (!k) throw new CliError(`no key with prefix ${arg} (give the prefix that \`atelier key list\` shows, or the whole key)`);
      if (!store.keys.revoke(k.id, Date.now())) throw new CliError(`key ${arg} is already revoked`);
      io.out(`revoked ${k.prefix}`);
      return 0;
    }
    throw new UsageError(`unknown command: key ${sub}\n\n${usage}`);
  });
}

function upstreams(argv: string[], io: Io): number {
  const usage = `Usage:\n  atelier upstreams [--json]\n  atelier upstreams enable <upstream> <account>\n\nIn-flight counts and cooldowns are the running server's last snapshot (AS OF); disabled flags are current.\n\n${COMMON_HELP}`;
  const { values, positionals } = parseCommand(argv, { json: { type: "boolean" } }, usage);
  if (values.help) return io.out(usage), 0;
  const [sub, upstreamId, accountId] = positionals;
  const config = configFrom(values);
  return withExistingStore(configFrom(values), (store) => {
    if (sub === undefined) {
      for (const line of showUpstreams(config, store, Date.now(), values.json === true)) io.out(line);
      return 0;
    }
    if (sub !== "enable") throw new UsageError(`unknown command: upstreams ${sub}\n\n${usage}`);
    if (!upstreamId || !accountId || positionals.length > 3) throw new UsageError(`upstreams enable takes an upstream id and an account id\n\n${usage}`);
    io.out(enableUpstreamAccount(config, store, upstreamId, accountId));
    return 0;
  });
}

/** The document the server serves at /openapi.json, rendered without listening. */
export async function renderOpenApi(config: Config): Promise<string> {
  const store = createStore(openDatabase(":memory:"), latestVersion());
  try {
    const app = createApp(createServices({ config, store, logger: silentLogger }));
    const res = await app.handle(new Request("http://localhost/openapi.json"));
    return JSON.stringify(await res.json(), null, 2);
  } finally {
    store.close();
  }
}

async function openapiCommand(argv: string[], io: Io): Promise<number> {
  const usage = `Usage: atelier openapi [--output FILE]\n\nPrints the OpenAPI document (the same one served at /openapi.json).\n\n  --output FILE   write it to FILE instead of stdout (replaced only once complete)\n\n${COMMON_HELP}`;
  const { values, positionals } = parseCommand(argv, { output: { type: "string" } }, usage);
  if (values.help) return io.out(usage), 0;
  noPositionals("openapi", positionals, usage);
  const document = await renderOpenApi(configFrom(values));
  if (values.output === undefined) return io.out(document), 0;
  const { renameSync, writeFileSync } = await import("node:fs");
  writeFileSync(`${values.output}.tmp`, `${document}\n`);
  renameSync(`${values.output}.tmp`, values.output);
  return 0;
}

/** For container HEALTHCHECKs on images without curl: GET /healthz on the configured port. */
async function healthcheck(argv: string[], io: Io): Promise<number> {
  const usage = `Usage: atelier healthcheck [--url URL]\n\nExits 0 when the server answers GET /healthz with 200 within 5 seconds, 1 otherwise.\n\n  --url URL   base URL to check (default: http://127.0.0.1:<port> from the configuration)\n\n${COMMON_HELP}`;
  const { values, positionals } = parseCommand(argv, { url: { type: "string" } }, usage);
  if (values.help) return io.out(usage), 0;
  noPositionals("healthcheck", positionals, usage);
  let base = values.url;
  if (base === undefined) {
    const { host, port } = configFrom(values).server;
    const local = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
    base = `http://${local}:${port}`;
  }
  try {
    const res = await fetch(new URL("/healthz", base), { signal: AbortSignal.timeout(5000) });
    if (res.status === 200) return io.out(`ok ${base}`), 0;
    io.err(`atelier healthcheck: ${base}/healthz answered ${res.status}`);
  } catch (e) {
    io.err(`atelier healthcheck: ${base}/healthz: ${(e as Error).message}`);
  }
  return 1;
}

const COMMANDS: Record<string, (argv: string[], io: Io) => number | Promise<number>> = {
  serve,
  healthcheck,
  user,
  credits,
  key,
  upstreams,
  openapi: openapiCommand,
};

export async function runCli(argv: string[], io: Io = { out: (s) => console.log(s), err: (s) => console.error(s) }): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === "--help" || command === "-h" || command === "help") {
    // Asked for: stdout and success; no command at all: a usage error.
    if (!command) return io.err(USAGE), 2;
    io.out(USAGE);
    return 0;
  }
  const run = COMMANDS[command];
  if (!run) {
    io.err(`atelier: unknown command '${command}'\n\n${USAGE}`);
    return 2;
  }
  try {
    return await run(rest, io);
  } catch (e) {
    if (e instanceof UsageError || e instanceof CliError || e instanceof ConfigError || e instanceof AccountError || e instanceof EmailTakenError || e instanceof DatabaseTooNewError) {
      io.err(`atelier ${command}: ${e.message}`);
      return e instanceof UsageError ? 2 : 1;
    }
    io.err(`atelier ${command}: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

if (import.meta.main) {
  const code = await runCli(process.argv.slice(2));
  if (code !== 0) process.exit(code);
  // serve never resolves; other commands fall through and exit 0.
}

