/**
 * A server for benches (bench/decode-responsiveness.ts), run as its own process so that its memory is
 * measured apart from the client's: the real server with a fast stand-in image engine (the bench
 * measures accepting and validating uploads, not rendering). Prints {url, key, pid} on stdout.
 */
import { loadConfig } from "../src/config";
import { addUser, createKey } from "../src/core/accounts";
import { encodePng } from "../src/core/image/codec";
import type { ImageEngine, ImageJob } from "../src/core/engine";
import { createLogger } from "../src/logger";
import { startServer } from "../src/server";

const dataDir = process.argv[2];
if (!dataDir) throw new Error("usage: bun bench/images-upload-server.ts <data-dir>");

const tiny = encodePng({ width: 64, height: 64, data: new Uint8Array(64 * 64 * 4).fill(200) });
const fast: ImageEngine = {
  generate: async (_job: ImageJob) => ({ bytes: tiny, mime: "image/png", width: 64, height: 64 }),
  edit: async (_job: ImageJob) => ({ bytes: tiny, mime: "image/png", width: 64, height: 64 }),
};

const config = loadConfig({ env: process.env, overrides: { port: 0, host: "127.0.0.1", data_dir: dataDir } });
config.server.log_requests = false;
const server = await startServer(config, createLogger(() => {}), { customize: (s) => s.engines.registerBuiltinImage(fast) });
const user = await addUser(server.services.store, Date.now, { email: "bench@example.com", credits: 1_000_000 });
const { key } = await createKey(server.services.store, Date.now, user.id, "bench");
console.log(
  JSON.stringify({
    url: server.url,
    key: key.secret,
    pid: process.pid,
    max_body_bytes: config.server.max_body_bytes,
    max_inflight_body_bytes: config.server.max_inflight_body_bytes,
  }),
);
process.on("SIGTERM", () => void server.stop().then(() => process.exit(0)));
