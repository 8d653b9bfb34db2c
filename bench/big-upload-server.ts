/**
 * The server side of bench/big-upload.ts, run as its own process so that its memory is measured
 * apart from the client's: the real server with the real built-in engine, from the source tree
 * given as the first argument (this checkout, or a baseline exported by the bench). Prints
 * {url, key, pid, …} on stdout.
 */
const [root, dataDir] = process.argv.slice(2);
if (!root || !dataDir) throw new Error("usage: bun bench/big-upload-server.ts <source-root> <data-dir>");

const { loadConfig } = (await import(`${root}/src/config.ts`)) as typeof import("../src/config");
const { addUser, createKey } = (await import(`${root}/src/core/accounts.ts`)) as typeof import("../src/core/accounts");
const { createLogger } = (await import(`${root}/src/logger.ts`)) as typeof import("../src/logger");
const { startServer } = (await import(`${root}/src/server.ts`)) as typeof import("../src/server");

const config = loadConfig({ env: process.env, overrides: { port: 0, host: "127.0.0.1", data_dir: dataDir } });
config.server.log_requests = false;
const server = await startServer(config, createLogger(() => {}));
const user = await addUser(server.services.store, Date.now, { email: "bench@example.com", credits: 1_000_000 });
const { key } = await createKey(server.services.store, Date.now, user.id, "bench");
console.log(
  JSON.stringify({
    url: server.url,
    key: key.secret,
    pid: process.pid,
    max_body_bytes: config.server.max_body_bytes,
    max_inflight_body_bytes: config.server.max_inflight_body_bytes,
    limits: config.limits,
  }),
);
export {};
process.on("SIGTERM", () => void server.stop().then(() => process.exit(0)));
