/**
 * Runs the app on a real socket: request ids and logging around every request, the body
 * pre-check that keeps Bun from answering over-size bodies itself, crash recovery at start,
 * and a graceful stop on SIGTERM/SIGINT.
 */
import type { Server } from "bun";
import { createApp, createServices, EXPOSED_HEADERS, type Services } from "./app";
import type { Config } from "./config";
import type { Logger } from "./logger";
import { openDatabase, latestVersion } from "./store/database";
import { createStore } from "./store";
import { authenticateApiRequest } from "./http/auth";
import { admitDeclaredBody, capChunkedBody } from "./http/body";
import { ApiError, errorResponse, serverError } from "./http/errors";
import { attachMeta, pathOf } from "./http/requestMeta";

export interface RunningServer {
  url: string;
  port: number;
  services: Services;
  /** Stops accepting, waits for in-flight work up to the grace period, closes the database. */
  stop(): Promise<void>;
}

/** Paths whose handlers may run longer than Bun's idle timeout (capped at 255 s). */
const LONG_RUNNING = /^\/v1\/(images|chat)\//;

export interface StartOptions {
  /** Lets tests swap parts (e.g. a slow or failing engine) before the app is built. */
  customize?: (services: Services) => void;
}

export async function startServer(config: Config, logger: Logger, options: StartOptions = {}): Promise<RunningServer> {
  const db = openDatabase(config.server.data_dir);
  const store = createStore(db, latestVersion());
  const services = createServices({ config, store, logger });
  options.customize?.(services);
  const recovered = store.credits.recoverInterrupted(services.clock());
  if (recovered.length > 0) logger.warn("refunded requests interrupted by a previous stop", { count: recovered.length, request_ids: recovered });

  const app = createApp(services);
  const inflight = new Set<Promise<unknown>>();

  const handle = async (request: Request, server: Server<undefined>): Promise<Response> => {
    // `request` is what the socket gave (requestIP/timeout need it); the app sees `capped`.
    const capped = capChunkedBody(request, config.server.max_body_bytes);
    const meta = attachMeta(capped);
    meta.clientAddress = server.requestIP(request)?.address;
    const path = pathOf(capped);
    if (LONG_RUNNING.test(path)) server.timeout(request, 0);
    let response: Response;
    try {
      // An API request with a body proves who it is before we read (and buffer) any of it, so
      // anonymous clients cannot spend the in-flight body budget that key holders rely on.
      if (path.startsWith("/v1/") && capped.body !== null && capped.headers.get("content-length") !== "0") {
        authenticateApiRequest(capped, services.auth);
      }
      admitDeclaredBody(capped, services.budget);
      response = await app.handle(capped);
    } catch (e) {
      const err = e instanceof ApiError ? e : serverError();
      if (!(e instanceof ApiError)) logger.error("unhandled error", { request_id: meta.id, error: String(e) });
      // Answered before the app (e.g. a declared body over the limit): a browser calling /v1 still gets to read it.
      const cors: Record<string, string> = path.startsWith("/v1/") ? { "access-control-allow-origin": request.headers.get("origin") ?? "*", "access-control-expose-headers": EXPOSED_HEADERS } : {};
      response = errorResponse(err, cors);
    } finally {
      services.budget.release(capped);
    }
    response.headers.set("x-request-id", meta.id);
    // @elysiajs/cors echoes a preflight's requested headers verbatim, "undefined" when it asked for none.
    if (response.headers.get("access-control-allow-headers") === "undefined") response.headers.delete("access-control-allow-headers");
    if (config.server.log_requests) {
      logger.info("request", {
        request_id: meta.id,
        method: request.method,
        path,
        status: response.status,
        duration_ms: Math.round((performance.now() - meta.startedAt) * 10) / 10,
        user_id: meta.userId ?? null,
      });
    }
    return response;
  };

  const server = Bun.serve({
    hostname: config.server.host,
    port: config.server.port,
    // Bun answers a declared Content-Length above this with its own empty 413 before we see the
    // request, so it is effectively unlimited: admitDeclaredBody and capChunkedBody enforce
    // max_body_bytes and answer with our JSON 413.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    idleTimeout: config.server.idle_timeout_s,
    fetch(request, srv) {
      const p = handle(request, srv);
      inflight.add(p);
      p.finally(() => inflight.delete(p));
      return p;
    },
  });

  const port = server.port ?? config.server.port;
  const url = `http://${config.server.host === "0.0.0.0" ? "127.0.0.1" : config.server.host}:${port}`;
  logger.info("listening", { url, data_dir: config.server.data_dir, models: services.catalog.list().map((m) => m.id) });

  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    services,
    stop() {
      stopping ??= (async () => {
        logger.info("shutting down", { inflight: inflight.size });
        const graceful = server.stop(false);
        const deadline = new Promise((r) => setTimeout(r, config.server.shutdown_grace_ms));
        await Promise.race([Promise.all([graceful, ...inflight, services.background.idle()]), deadline]);
        await server.stop(true);
        services.upstreams.close();
        store.close();
        logger.info("stopped");
      })();
      return stopping;
    },
  };
}
