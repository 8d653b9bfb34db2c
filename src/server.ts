/**
 * Runs the app on a real socket: request ids and logging around every request, the body
 * guard (size, budget and rate, before Bun could answer over-size bodies itself), crash recovery at start,
 * and a graceful stop on SIGTERM/SIGINT.
 */
import { SMALL_API_BODY_BYTES } from "./core/limits";
import type { Server } from "bun";
import { createApp } from "./app";
import { corsHeadersForError } from "./http/cors";
import { apiErrorOf } from "./http/errorMapping";
import { createServices, type Services } from "./services";
import type { Config } from "./config";
import type { Clock } from "./core/clock";
import type { Logger } from "./logger";
import { openStore, storeDialect } from "./store/open";
import { authenticateApiRequest } from "./http/auth";
import { admitDeclaredBody, guardBody, type BodyRules } from "./http/body";
import { newId } from "./core/ids";
import { errorResponse, serverError } from "./http/errors";
import { SERVING_BUSY_TIMEOUT_MS } from "./store/busy";
import { attachMeta, pathOf } from "./http/requestMeta";
import { accessLogFields } from "./http/accessLog";
import { routeOf } from "./http/metrics";

export interface RunningServer {
  url: string;
  port: number;
  services: Services;
  /** Stops accepting, waits for in-flight work up to the grace period, closes the database. */
  stop(): Promise<void>;
}

/** Paths whose handlers may run longer than Bun's idle timeout (capped at 255 s): POSTs only. */
const LONG_RUNNING = /^\/v1\/(images|chat)\//;

export interface StartOptions {
  /** Lets tests swap parts (e.g. a slow or failing engine) before the app is built. */
  customize?: (services: Services) => void;
  /** The wall clock of every record and range (tests: e.g. one that stays clear of a UTC midnight). Date.now by default. */
  clock?: Clock;
}

export async function startServer(config: Config, logger: Logger, options: StartOptions = {}): Promise<RunningServer> {
  const store = await openStore(config);
  const services = createServices({ config, store, logger, clock: options.clock });
  // The setup token (when there is no admin yet) is in the log before the socket opens.
  await services.workbench.ready;
  // A key that cannot open the stored webhook secrets would fail every delivery it attempts:
  // refused here, before anything runs (what was opened is closed again).
  try {
    await services.taskEvents.keyCheck.verify();
  } catch (e) {
    await services.upstreams.close();
    services.redis?.close();
    await store.close();
    throw e;
  }
  options.customize?.(services);
  // Embedded (SQLite), this is the only server on the file (`serve` took the data directory's
  // lock, cli/serverLock, before it got here): whatever is still pending was interrupted.
  // Sharing PostgreSQL, other live instances may be running theirs: only this instance's own (a
  // previous run under its [instance] id) are refunded at start, the rest by the heartbeat's
  // sweep once their owner's lease has run out.
  const recovered = storeDialect(config) === "postgres" ? [] : await store.credits.recoverInterrupted(services.clock(), services.tasks.retentionMs);
  recovered.push(...(await services.liveness.start()));
  if (recovered.length > 0) logger.warn("refunded requests interrupted by a previous stop", { count: recovered.length, request_ids: recovered });
  // From here on a locked database must not freeze the event loop: writes retry asynchronously (store/busy).
  store.setBusyTimeout(SERVING_BUSY_TIMEOUT_MS);
  // Nor a WAL checkpoint's fsyncs: they run on a worker thread (store/walCheckpoints).
  store.checkpointInBackground((message) => logger.warn(message));
  // Async tasks left queued by a previous run start now.
  services.tasks.start();
  services.taskEvents.start();
  // Expired images go, and files and rows are reconciled (also after a crash mid-sweep).
  services.imageSweeper.start();
  services.metrics.start();

  const app = createApp(services);
  // The app's composed handler itself: app.handle wraps it in an async arrow whose returned
  // promise costs every request two more turns of the microtask queue to adopt.
  const answer = app.fetch;
  // Requests being answered (also the in-flight gauge); a stop waits for it to reach zero. A
  // count rather than a set of promises: nothing to allocate or settle per request.
  const inFlight = services.httpInFlight;
  let allAnswered: (() => void) | undefined;

  const { server: serverConfig } = config;
  const apiBody: BodyRules = {
    maxBytes: serverConfig.max_body_bytes,
    graceMs: serverConfig.body_grace_ms,
    minBytesPerSecond: serverConfig.min_body_bytes_per_s,
    // /v1 bodies are read by our parsers (acceptApiBody), which pace a small unwrapped body.
    smallBodyBytes: SMALL_API_BODY_BYTES,
  };
  // Anyone may post to the workbench's forms without a key: they get small bodies only, so
  // anonymous sockets cannot spend the in-flight budget that key holders' uploads rely on.
  // Elysia's own parsers read them, so they are always wrapped.
  const formBody: BodyRules = { ...apiBody, maxBytes: serverConfig.max_form_body_bytes, smallBodyBytes: 0 };

  /** The answer to one request, with its request id, metrics and access log line; counted in flight until it settles. */
  const handle = async (request: Request, server: Server<undefined>): Promise<Response> => {
    inFlight.count++;
    // In this frame rather than a callback on the returned promise: nothing more to allocate per request.
    try {
      // `request` is what the socket gave (requestIP/timeout need it); the app sees `guarded`.
      const meta = attachMeta(request);
      let guarded = request;
      let path: string | undefined;
      let response: Response;
      /** The connection's idle timeout is off while this request runs. */
      let untimed = false;
      try {
        meta.clientAddress = () => server.requestIP(request)?.address;
        path = pathOf(request);
        const isApi = path.startsWith("/v1/");
        if (request.method === "POST" && LONG_RUNNING.test(path)) {
          server.timeout(request, 0);
          untimed = true;
        }
        const rules = isApi ? apiBody : formBody;
        guarded = guardBody(request, rules, services.budget);
        // An API request with a body proves who it is before we read (and buffer) any of it.
        // (Each step answers synchronously when it can: awaited only when it returned a promise.)
        if (isApi && meta.bodyUnread) {
          const principal = authenticateApiRequest(guarded, services.auth);
          if (principal instanceof Promise) await principal;
        }
        // The signal is read only if the body has to wait for the budget (reading it costs every request).
        const admitted = admitDeclaredBody(guarded, services.budget, rules.maxBytes, () => request.signal);
        if (admitted) await admitted;
        response = await answer(guarded);
      } catch (e) {
        const err = apiErrorOf(e) ?? serverError();
        if (err.status === 500) logger.error("unhandled error", { request_id: meta.id, error: String(e), stack: e instanceof Error ? e.stack : undefined });
        // Answered before the app (e.g. a declared body over the limit): a browser calling /v1 still gets to read it.
        response = errorResponse(err, corsHeadersForError(request, path));
      } finally {
        services.budget.release(request);
      }
      // The one place that sets it: every answer, the app's and the server's own.
      response.headers.set("x-request-id", meta.id);
      // The unread rest of a body would be taken for the next request on this connection.
      if (meta.bodyUnread) response.headers.set("connection", "close");
      // The timeout stays with the connection in Bun, so it is given back with the answer: else
      // one request (a keyless one too) left a keep-alive socket that never times out. A stream
      // still runs after this: it gets the connection to itself, closed when it ends.
      if (untimed) {
        if (response.headers.get("content-type")?.startsWith("text/event-stream")) response.headers.set("connection", "close");
        else server.timeout(request, serverConfig.idle_timeout_s);
      }
      const durationMs = performance.now() - meta.startedAt;
      services.metrics.observeRequest(routeOf(request), request.method, response.status, durationMs / 1000);
      if (serverConfig.log_requests) {
        const fields = accessLogFields({ meta, method: request.method, path, status: response.status, durationMs }, store);
        // Awaited only when the line needs the request's record.
        logger.info("request", fields instanceof Promise ? await fields : fields);
      }
      return response;
    } finally {
      if (--inFlight.count === 0) allAnswered?.();
    }
  };

  const server = Bun.serve({
    hostname: config.server.host,
    port: config.server.port,
    // Bun answers a declared Content-Length above this with its own empty 413 before we see the
    // request, so it is effectively unlimited: admitDeclaredBody and guardBody enforce
    // max_body_bytes and answer with our JSON 413.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    idleTimeout: config.server.idle_timeout_s,
    // Never Bun's development error page (it shows the stack, paths and source to anyone).
    development: false,
    fetch: handle,
    // Only reached if answering itself throws (handle catches everything else): still our shape.
    error(error) {
      const id = newId("req_");
      logger.error("unhandled error", { request_id: id, error: String(error), stack: error.stack });
      return errorResponse(serverError(), { "x-request-id": id, connection: "close" });
    },
  });

  const port = server.port ?? config.server.port;
  const url = `http://${config.server.host === "0.0.0.0" ? "127.0.0.1" : config.server.host}:${port}`;
  // The address the socket is bound to, as the system reports it (port 0 resolved; "0.0.0.0" or "::" means every interface).
  const boundHost = server.hostname ?? config.server.host;
  const address = `${boundHost.includes(":") ? `[${boundHost}]` : boundHost}:${port}`;
  logger.info("listening", { address, url, data_dir: config.server.data_dir, models: services.catalog.list().map((m) => m.id) });

  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    services,
    stop() {
      stopping ??= (async () => {
        logger.info("shutting down", { inflight: inFlight.count });
        services.tasks.stop();
        services.metrics.stop();
        const sweepStopped = services.imageSweeper.stop();
        const graceful = server.stop(false);
        let graceTimer: ReturnType<typeof setTimeout> | undefined;
        const deadline = new Promise((r) => (graceTimer = setTimeout(r, config.server.shutdown_grace_ms)));
        const answered = inFlight.count === 0 ? undefined : new Promise<void>((resolve) => (allAnswered = resolve));
        await Promise.race([Promise.all([graceful, answered, services.background.idle(), services.taskEvents.stop(), sweepStopped]), deadline]);
        clearTimeout(graceTimer);
        // The heartbeat goes on until the drain is over (or the grace has run out): an instance
        // that stopped beating first would see its lease run out mid-drain, and another instance
        // would refund, as interrupted, the requests and tasks it is still finishing (their
        // images then made for nothing, their clients answered 500). What the grace cut off is
        // refunded that way once this instance has stopped.
        const livenessStopped = services.liveness.stop();
        await server.stop(true);
        await livenessStopped;
        await services.upstreams.close();
        services.redis?.close();
        await store.close();
        logger.info("stopped");
      })();
      return stopping;
    },
  };
}
