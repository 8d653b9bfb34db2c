/**
 * A keep-alive HTTP/1.1 client for the upstream calls that send one request and read one whole
 * answer (upstreamHttp's callJson) to a plain `http:` upstream: the local servers most people
 * run (vLLM, Ollama, LM Studio, ComfyUI, WebUI, an OpenAI-compatible proxy on the same host).
 *
 * Why not fetch: Bun's fetch runs every call on its HTTP client thread and hands the answer
 * back to the JavaScript thread, two thread wake-ups per request. On a loaded gateway that
 * hand-off cost more than the rest of the call: `bench/floor.ts`'s floor gateway spent 58 µs of
 * CPU per chat request with fetch and 44 µs with a client on `Bun.connect`, whose sockets live
 * on the JavaScript thread's own event loop. fetch stays for everything this client does not
 * take: `https:` (certificate checks are fetch's), an HTTP proxy in the environment (fetch
 * honours it), streamed answers, multipart bodies, downloads, and any redirect (the call is
 * sent again through fetch, which follows it).
 *
 * What it does, bounded everywhere: requests written with backpressure; answers framed by
 * Content-Length, chunked transfer coding or the connection's close; 1xx answers skipped; a
 * head at most 64 KiB; a body at most what the caller allows for its status, counted as it
 * arrives; gzip, deflate and br decoded (it asks for identity; a server may compress anyway)
 * within the same limit. A connection goes back to its origin's idle list only after a whole
 * answer that allows it, and an idle one is not reused after IDLE_REUSE_MS (servers close idle
 * connections after about 5 s; reusing one as it closes would lose the request). A GET on a
 * reused connection that closes before any byte of the answer is sent once more on a new one
 * (the server most likely closed it idle as the request arrived). A POST is not: from here a
 * server that closed an idle connection looks the same as one that read the request, worked
 * on it (a generation, billed) and died, and a POST is not idempotent (RFC 9110 §9.2.2; Go's
 * and undici's clients decide the same). Its attempt fails, and the account pool decides
 * whether to try again, visibly.
 */
import { brotliDecompressSync, gunzipSync, inflateRawSync, inflateSync } from "node:zlib";
import type { Socket } from "bun";
import { listenForAbort, type CancelView } from "../core/cancelScope";
import { concatChunks } from "../core/bytes";

/** An answer's status and header lines; its Headers are made when read (most callers never do). */
export class AnswerHead {
  private made: Headers | null = null;
  constructor(
    readonly status: number,
    /** The head as received (checked line by line when it was parsed). */
    private readonly text: string,
    /** Where its header lines start. */
    private readonly fieldsFrom: number,
  ) {}

  get headers(): Headers {
    if (!this.made) {
      const headers = new Headers();
      const text = this.text;
      for (let start = this.fieldsFrom; start < text.length; ) {
        let end = text.indexOf("\r\n", start);
        if (end < 0) end = text.length;
        const colon = text.indexOf(":", start);
        headers.append(text.slice(start, colon), text.slice(colon + 1, end).trim());
        start = end + 2;
      }
      this.made = headers;
    }
    return this.made;
  }
}

/** A whole answer: its status, its header lines and its body (decoded from any content coding). */
export interface Http1Answer {
  head: AnswerHead;
  body: Uint8Array;
}

/** Where a call failed: before any answer arrived (nothing usable came back), or while its body was read. */
export type Http1Stage = "request" | "answer";

/** A call that failed for a reason of the connection or the protocol (an abort rejects with the signal's reason instead). */
export class Http1Error extends Error {
  constructor(
    message: string,
    readonly stage: Http1Stage,
    /** The answer's head when it arrived (a body over the limit, a broken body). */
    readonly head?: AnswerHead,
    /** The body was larger than this limit. */
    readonly tooLarge?: number,
  ) {
    super(message);
    this.name = "Http1Error";
  }
}

export interface Http1Request {
  method: "GET" | "POST";
  headers?: Readonly<Record<string, string>>;
  body?: string;
  cancel: CancelView;
  /** The largest body accepted for an answer of this status (bytes, after decoding). */
  limitFor: (status: number) => number;
}

const MAX_HEAD_BYTES = 64 * 1024;
/** A length-framed body up to this size gets its exact buffer when the head arrives. */
const PREALLOCATE_BYTES = 1024 * 1024;
const MAX_CHUNK_LINE_BYTES = 4096;
/** An idle connection older than this is closed rather than reused (below the usual 5 s server keep-alive). */
export const IDLE_REUSE_MS = 4000;
/** Idle connections kept per origin at most; more are closed when they come back. */
const MAX_IDLE_PER_ORIGIN = 1024;
/** Bodies up to this size are written as part of the head's string (one write, no encoding step). */
const INLINE_BODY_CHARS = 64 * 1024;
const USER_AGENT = `Bun/${Bun.version}`;
const PROXY_VARIABLES = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"];

/**
 * Where this client takes the call, else null (fetch takes it): an `http:` URL without
 * credentials, a string body or none, and no HTTP proxy set in the environment.
 */
export function http1Target(url: string, body: unknown): Http1Target | null {
  if (!url.startsWith("http://")) return null;
  if (body !== undefined && typeof body !== "string") return null;
  if (proxyConfigured()) return null;
  let target = targets.get(url);
  if (target === undefined) {
    target = parseTarget(url);
    // An upstream's URLs are few (its endpoints); query strings of polls are not kept.
    if (targets.size < MAX_KEPT_TARGETS && !url.includes("?")) targets.set(url, target);
  }
  return target;
}

/** A URL this client calls: its origin's connections and the start of its request line, worked out once. */
export interface Http1Target {
  readonly href: string;
  readonly origin: Origin;
  /** " <path and query> HTTP/1.1\r\nHost: <host>\r\n", after the method. */
  readonly line: string;
}

const MAX_KEPT_TARGETS = 256;
const targets = new Map<string, Http1Target | null>();

function parseTarget(url: string): Http1Target | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  if (parsed.username || parsed.password) return null;
  return { href: parsed.href, origin: originOf(parsed), line: ` ${parsed.pathname}${parsed.search} HTTP/1.1\r\nHost: ${parsed.host}\r\n` };
}

let proxySet: boolean | undefined;
function proxyConfigured(): boolean {
  return (proxySet ??= PROXY_VARIABLES.some((name) => (process.env[name] ?? "") !== ""));
}

/** An AbortSignal seen as a CancelView (for callers that have a signal, not a scope). */
export function cancelViewOf(signal: AbortSignal): CancelView {
  return {
    get aborted() {
      return signal.aborted;
    },
    get reason() {
      return signal.reason as unknown;
    },
    onAbort: (listener) => listenForAbort(signal, listener),
  };
}

/** Tests only: read the proxy variables again. */
export function resetHttp1ForTests(): void {
  proxySet = undefined;
}

/** Sends one request and resolves with its whole answer; rejects with an Http1Error, or the signal's reason when it aborts. */
export function http1Request(target: Http1Target, request: Http1Request): Promise<Http1Answer> {
  if (request.cancel.aborted) return Promise.reject(request.cancel.reason);
  const head = requestHead(target, request);
  return new Promise<Http1Answer>((resolve, reject) => {
    const exchange = new Exchange(target.origin, head, request, resolve, reject);
    exchange.start();
  });
}

// ---------------------------------------------------------------------------------------------
// Origins and their idle connections

export interface Origin {
  key: string;
  /** Remembered in `origins` (its idle connections can be found again). */
  kept: boolean;
  hostname: string;
  port: number;
  idle: Connection[];
}

const origins = new Map<string, Origin>();
const MAX_ORIGINS = 1024;

function originOf(url: URL): Origin {
  const key = url.host;
  let origin = origins.get(key);
  if (!origin) {
    // URL keeps an IPv6 literal's brackets in hostname; a socket wants the address alone.
    const hostname = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    // Hosts come from the config, and from status URLs a queue upstream answers: past this many,
    // a host's connections are not kept for reuse (its origin is not remembered).
    origin = { key, kept: origins.size < MAX_ORIGINS, hostname, port: url.port === "" ? 80 : Number(url.port), idle: [] };
    if (origin.kept) origins.set(key, origin);
  }
  return origin;
}

/** An idle connection still fit for another request, else null (stale ones are closed on the way). */
function takeIdle(origin: Origin, now: number): Connection | null {
  for (;;) {
    const conn = origin.idle.pop();
    if (!conn) return null;
    conn.parked = false;
    if (conn.closed) continue;
    if (now - conn.idleSince > IDLE_REUSE_MS) {
      conn.destroy();
      continue;
    }
    conn.socket!.ref();
    conn.reused = true;
    return conn;
  }
}

function park(conn: Connection): void {
  const idle = conn.origin.idle;
  if (idle.length >= MAX_IDLE_PER_ORIGIN || !conn.origin.kept) {
    conn.destroy();
    return;
  }
  conn.idleSince = Date.now();
  // An idle connection does not keep the process alive.
  conn.socket!.unref();
  conn.parked = true;
  idle.push(conn);
}

/** Closes every idle connection (tests; in a server they are unref'd and end with the process). */
export function closeIdleHttp1Connections(): void {
  for (const origin of origins.values()) {
    for (const conn of origin.idle.splice(0)) conn.destroy();
  }
}

// ---------------------------------------------------------------------------------------------
// One request and its answer

/** The request's head, and its body to write after it when the body is too large to join. */
interface EncodedRequest {
  text: string;
  body: string | null;
}

function requestHead(target: Http1Target, request: Http1Request): EncodedRequest {
  let text = request.method + target.line + headerBlock(request.headers);
  const body = request.body;
  if (body === undefined) return { text: request.method === "POST" ? `${text}Content-Length: 0\r\n\r\n` : `${text}\r\n`, body: null };
  text += `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
  return body.length <= INLINE_BODY_CHARS ? { text: text + body, body: null } : { text, body };
}

/**
 * The header lines of a headers record, checked and written once per record: adapters send
 * the same frozen record with every request of an account (openai's transport keeps one).
 */
const headerBlocks = new WeakMap<object, string>();
const NO_HEADERS = {};
function headerBlock(headers: Readonly<Record<string, string>> = NO_HEADERS): string {
  let block = headerBlocks.get(headers);
  if (block !== undefined) return block;
  block = "Connection: keep-alive\r\n";
  let accept = false;
  let userAgent = false;
  for (const name in headers) {
    const value = headers[name]!;
    if (!validHeader(name, value)) throw new TypeError(`invalid header ${JSON.stringify(name)}`);
    const lower = name.toLowerCase();
    // Framing and connection headers are this client's to write.
    if (lower === "host" || lower === "content-length" || lower === "transfer-encoding" || lower === "connection" || lower === "accept-encoding") continue;
    if (lower === "accept") accept = true;
    if (lower === "user-agent") userAgent = true;
    block += `${name}: ${value}\r\n`;
  }
  if (!accept) block += "Accept: */*\r\n";
  if (!userAgent) block += `User-Agent: ${USER_AGENT}\r\n`;
  block += "Accept-Encoding: identity\r\n";
  // Only a record nobody can change is kept: a mutable one may say something else next time.
  if (Object.isFrozen(headers)) headerBlocks.set(headers, block);
  return block;
}

/** "HTTP/1.x NNN[ reason]": NNN, else 0. */
function statusCodeOf(line: string): number {
  if (!line.startsWith("HTTP/1.") || (line.charCodeAt(7) !== 48 && line.charCodeAt(7) !== 49) || line.charCodeAt(8) !== 32) return 0;
  if (line.length > 12 && line.charCodeAt(12) !== 32) return 0;
  let code = 0;
  for (let i = 9; i < 12; i++) {
    const d = line.charCodeAt(i) - 48;
    if (!(d >= 0 && d <= 9)) return 0;
    code = code * 10 + d;
  }
  return code >= 100 ? code : 0;
}

/** Characters of an HTTP token (RFC 9110 5.6.2), by code. */
const TOKEN = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") TOKEN[c.charCodeAt(0)] = 1;
/** `text` from `start` to `end` is a token. */
function isToken(text: string, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c >= 128 || TOKEN[c] === 0) return false;
  }
  return true;
}

const DIGITS = /^\d{1,15}$/;
/** A CR not followed by LF, or an LF not after a CR. */
const BARE_LINE_BREAK = /\r(?!\n)|(?<!\r)\n/;
const HEADER_VALUE_FORBIDDEN = /[\0\r\n]/;
function validHeader(name: string, value: string): boolean {
  return name.length > 0 && isToken(name, 0, name.length) && !HEADER_VALUE_FORBIDDEN.test(value);
}

class Exchange {
  /** Any byte of an answer arrived on the current connection. */
  answered = false;
  private retried = false;
  private conn: Connection | null = null;
  private settled = false;
  private stopListening: (() => void) | null = null;

  constructor(
    readonly origin: Origin,
    readonly encoded: EncodedRequest,
    readonly request: Http1Request,
    private readonly resolveAnswer: (answer: Http1Answer) => void,
    private readonly rejectAnswer: (e: unknown) => void,
  ) {}

  start(): void {
    this.stopListening = this.request.cancel.onAbort((reason) => this.abort(reason));
    this.dispatch(takeIdle(this.origin, Date.now()));
  }

  /** Sends on `conn`, or on a new connection when there is none. */
  private dispatch(conn: Connection | null): void {
    if (conn) {
      this.sendOn(conn);
      return;
    }
    Connection.open(this.origin).then(
      (fresh) => {
        if (this.settled) fresh.release();
        else this.sendOn(fresh);
      },
      (e: unknown) => this.fail(new Http1Error(`connection to ${this.origin.key} failed: ${errorText(e)}`, "request")),
    );
  }

  private sendOn(conn: Connection): void {
    this.conn = conn;
    this.answered = false;
    conn.begin(this);
  }

  /** The connection closed or broke before the answer was whole. */
  connectionLost(conn: Connection, reason: string): void {
    if (this.settled) return;
    this.conn = null;
    // Closed before any byte of the answer, on a connection taken from the idle list: the server
    // most likely closed it idle and never read this request. Sent once more only when sending
    // it twice does no harm (see the header).
    if (!this.answered && conn.reused && !this.retried && this.request.method === "GET") {
      this.retried = true;
      this.dispatch(null);
      return;
    }
    this.fail(conn.headError ?? new Http1Error(reason, this.answered && conn.parsedHead ? "answer" : "request", conn.parsedHead ?? undefined));
  }

  succeed(answer: Http1Answer): void {
    if (this.settled) return;
    this.settle();
    this.resolveAnswer(answer);
  }

  fail(e: unknown): void {
    if (this.settled) return;
    this.settle();
    this.rejectAnswer(e);
  }

  private abort(reason: unknown): void {
    if (this.settled) return;
    const conn = this.conn;
    this.conn = null;
    this.fail(reason);
    // Whatever the connection was doing for this request is of no use to the next one.
    conn?.destroy();
  }

  private settle(): void {
    this.settled = true;
    this.stopListening?.();
    this.stopListening = null;
  }
}

// ---------------------------------------------------------------------------------------------
// A connection: writing one request, parsing its answer

type BodyMode = "length" | "chunked" | "close" | "none";
type ChunkState = "size" | "data" | "data-end" | "trailers";

const socketHandlers = {
  data(socket: Socket<Connection>, data: Buffer) {
    socket.data.receive(data);
  },
  drain(socket: Socket<Connection>) {
    socket.data.writeMore();
  },
  end(socket: Socket<Connection>) {
    socket.data.peerEnded();
  },
  close(socket: Socket<Connection>, error?: Error) {
    socket.data.closedBy(error);
  },
  error(socket: Socket<Connection>, error: Error) {
    socket.data.closedBy(error);
  },
};

class Connection {
  socket: Socket<Connection> | null = null;
  closed = false;
  idleSince = 0;
  /** On its origin's idle list now. */
  parked = false;
  /** Taken from the idle list at least once (a close before any answer byte may be the server's idle timeout). */
  reused = false;
  private exchange: Exchange | null = null;
  private unwritten: Uint8Array | null = null;
  private written = 0;

  // The answer being parsed.
  /** A chunked body's unparsed rest (a size line cut between two reads; at most a few KiB). */
  private pending: Buffer | null = null;
  /**
   * An unfinished head: its bytes so far at the start of a buffer that doubles as it fills, so a
   * head arriving a few bytes at a time is copied about twice in all, not once per read (with a
   * concatenation per read, a 64 KiB head sent a byte at a time copied some 2 GiB).
   */
  private headStore: Buffer | null = null;
  private headUsed = 0;
  parsedHead: AnswerHead | null = null;
  headError: Http1Error | null = null;
  private mode: BodyMode = "none";
  private limit = 0;
  private reusable = true;
  private encoding = "";
  private bodyBuffer: Uint8Array | null = null;
  /** A length-framed body's Content-Length. */
  private declared = 0;
  private chunks: Uint8Array[] = [];
  private received = 0;
  private chunkState: ChunkState = "size";
  private chunkLeft = 0;
  private trailerBytes = 0;

  private constructor(readonly origin: Origin) {}

  static async open(origin: Origin): Promise<Connection> {
    const conn = new Connection(origin);
    conn.socket = await Bun.connect<Connection>({ hostname: origin.hostname, port: origin.port, data: conn, socket: socketHandlers });
    return conn;
  }

  begin(exchange: Exchange): void {
    this.exchange = exchange;
    this.resetAnswer();
    const { text, body } = exchange.encoded;
    if (body === null) this.write(text, null);
    else this.write(text, Buffer.from(body));
  }

  /** Writes the head (a string) and then the body, keeping what the socket did not take for `drain`. */
  private write(text: string, body: Uint8Array | null): void {
    const socket = this.socket!;
    const wrote = socket.write(text);
    if (wrote < 0) return this.closedBy(new Error("the connection was closed before the request was written"));
    if (wrote < Buffer.byteLength(text)) {
      const rest = Buffer.from(text).subarray(wrote);
      this.unwritten = body ? Buffer.concat([rest, body]) : rest;
      this.written = 0;
      return;
    }
    if (body) {
      this.unwritten = body;
      this.written = 0;
      this.writeMore();
    }
  }

  writeMore(): void {
    const bytes = this.unwritten;
    if (!bytes || this.closed) return;
    const wrote = this.socket!.write(bytes, this.written, bytes.byteLength - this.written);
    if (wrote < 0) return this.closedBy(new Error("the connection was closed before the request was written"));
    this.written += wrote;
    if (this.written >= bytes.byteLength) {
      this.unwritten = null;
      this.written = 0;
    }
  }

  receive(data: Buffer): void {
    const exchange = this.exchange;
    if (!exchange) {
      // Bytes nobody asked for: the connection cannot be trusted for a next request.
      this.destroy();
      return;
    }
    exchange.answered = true;
    try {
      this.parse(data);
    } catch (e) {
      this.headError = e instanceof Http1Error ? e : new Http1Error(errorText(e), this.parsedHead ? "answer" : "request", this.parsedHead ?? undefined);
      this.exchange = null;
      exchange.fail(this.headError);
      this.destroy();
    }
  }

  private resetAnswer(): void {
    this.pending = null;
    this.headStore = null;
    this.headUsed = 0;
    this.parsedHead = null;
    this.headError = null;
    this.mode = "none";
    this.reusable = true;
    this.encoding = "";
    this.bodyBuffer = null;
    this.declared = 0;
    this.chunks = [];
    this.received = 0;
    this.chunkState = "size";
    this.chunkLeft = 0;
    this.trailerBytes = 0;
  }

  private parse(data: Buffer): void {
    let buf = data;
    // Where the search for a head's end starts: the bytes already searched cannot hold it, but
    // for the last three (an end that straddles two reads).
    let searchFrom = 0;
    if (this.headStore) {
      searchFrom = Math.max(0, this.headUsed - 3);
      buf = this.appendToHead(data);
    } else if (this.pending) {
      buf = Buffer.concat([this.pending, data]);
      this.pending = null;
    }
    let at = 0;
    while (!this.parsedHead) {
      const end = buf.indexOf("\r\n\r\n", Math.max(at, searchFrom));
      if (end < 0) {
        if (buf.byteLength - at > MAX_HEAD_BYTES) throw new Http1Error(`the upstream's answer head exceeds ${MAX_HEAD_BYTES} bytes`, "request");
        if (this.headStore && at === 0) return; // already kept where it is
        this.headStore = null;
        this.headUsed = 0;
        this.appendToHead(buf.subarray(at));
        return;
      }
      this.headStore = null;
      this.headUsed = 0;
      searchFrom = 0;
      if (end - at > MAX_HEAD_BYTES) throw new Http1Error(`the upstream's answer head exceeds ${MAX_HEAD_BYTES} bytes`, "request");
      const informational = this.readHead(buf.toString("latin1", at, end));
      at = end + 4;
      if (informational) this.parsedHead = null;
    }
    this.readBody(buf, at);
  }

  /** Parses a head; true when it was a 1xx answer (another head follows). */
  private readHead(head: string): boolean {
    const firstEnd = head.indexOf("\r\n");
    const statusLine = firstEnd < 0 ? head : head.slice(0, firstEnd);
    const code = statusCodeOf(statusLine);
    if (code === 0) throw new Http1Error(`the upstream did not answer in HTTP/1.x (${JSON.stringify(statusLine.slice(0, 40))})`, "request");
    if (code === 101) throw new Http1Error("the upstream switched protocols", "request");
    if (code < 200) return true;
    const http11 = statusLine.charCodeAt(7) === 49; // "HTTP/1.1"
    // No NUL, no CR or LF but as a line end, anywhere in the head.
    if (head.indexOf("\0") >= 0 || BARE_LINE_BREAK.test(head)) throw new Http1Error("the upstream answered a malformed header value", "request");
    const fieldsFrom = firstEnd < 0 ? head.length : firstEnd + 2;
    let length: string | null = null;
    let transfer: string | null = null;
    let connection = "";
    let encoding = "";
    for (let start = fieldsFrom; start < head.length; ) {
      let end = head.indexOf("\r\n", start);
      if (end < 0) end = head.length;
      const colon = head.indexOf(":", start);
      // No space before the colon, no folded continuation line (RFC 9112 5.1, 5.2).
      if (colon <= start || colon >= end || !isToken(head, start, colon)) throw new Http1Error("the upstream answered a malformed header line", "request");
      // Only the fields that frame the answer are read here (by their names' lengths first); the
      // others wait in the head for AnswerHead.headers.
      const nameLength = colon - start;
      if (nameLength === 14 || nameLength === 17 || nameLength === 10 || nameLength === 16) {
        const name = head.slice(start, colon).toLowerCase();
        if (name === "content-length") {
          const value = head.slice(colon + 1, end).trim();
          if (length === null && DIGITS.test(value)) length = value;
          else
            for (const part of value.split(",")) {
              const v = part.trim();
              if (!DIGITS.test(v) || (length !== null && length !== v)) throw new Http1Error("the upstream answered an invalid Content-Length", "request");
              length = v;
            }
        } else if (name === "transfer-encoding") {
          const value = head.slice(colon + 1, end).trim();
          transfer = transfer === null ? value : `${transfer}, ${value}`;
        } else if (name === "connection") connection += `,${head.slice(colon + 1, end).trim().toLowerCase()}`;
        else if (name === "content-encoding") encoding = head.slice(colon + 1, end).trim().toLowerCase();
      }
      start = end + 2;
    }
    this.parsedHead = new AnswerHead(code, head, fieldsFrom);
    this.limit = this.exchange!.request.limitFor(code);
    this.encoding = encoding;
    this.reusable = http11 ? connection === "" || !/(^|,)\s*close\s*(,|$)/.test(connection) : /(^|,)\s*keep-alive\s*(,|$)/.test(connection);
    if (code === 204 || code === 304) this.mode = "none";
    else if (transfer !== null) {
      const codings = transfer.toLowerCase().split(",").map((c) => c.trim());
      if (codings[codings.length - 1] === "chunked") {
        if (codings.length > 1) throw new Http1Error(`unsupported transfer coding ${JSON.stringify(transfer)}`, "request");
        this.mode = "chunked";
      } else throw new Http1Error(`unsupported transfer coding ${JSON.stringify(transfer)}`, "request");
      // Both framings in one answer, or chunks in HTTP/1.0: the framing is suspect (RFC 9112
      // 6.1), the connection is not reused.
      if (length !== null || !http11) this.reusable = false;
    } else if (length !== null) {
      const declared = Number(length);
      if (declared > this.limit) throw this.tooLarge();
      this.mode = declared === 0 ? "none" : "length";
      this.declared = declared;
    } else {
      this.mode = "close";
      this.reusable = false;
    }
    return false;
  }

  private tooLarge(): Http1Error {
    const head = this.parsedHead!;
    return new Http1Error(`upstream answer exceeds the limit of ${this.limit} bytes`, "answer", head, this.limit);
  }

  private readBody(buf: Buffer, at: number): void {
    switch (this.mode) {
      case "none":
        if (at < buf.byteLength) this.reusable = false; // bytes past the answer: not trusted for the next one
        this.finish(new Uint8Array(0));
        return;
      case "length": {
        // The whole body in this read (the usual small answer): a view of it, no copy.
        if (this.received === 0 && buf.byteLength - at >= this.declared) {
          if (buf.byteLength - at > this.declared) this.reusable = false;
          this.finish(buf.subarray(at, at + this.declared));
          return;
        }
        if (this.declared > PREALLOCATE_BYTES) {
          // A large body is not allocated on the word of a head alone: its parts are kept as they come.
          const take = Math.min(this.declared - this.received, buf.byteLength - at);
          this.chunks.push(buf.subarray(at, at + take));
          this.received += take;
          if (this.received === this.declared) {
            if (at + take < buf.byteLength) this.reusable = false;
            this.finish(joinChunks(this.chunks, this.received));
          }
          return;
        }
        const body = (this.bodyBuffer ??= new Uint8Array(this.declared));
        const take = Math.min(body.byteLength - this.received, buf.byteLength - at);
        body.set(buf.subarray(at, at + take), this.received);
        this.received += take;
        if (this.received === body.byteLength) {
          if (at + take < buf.byteLength) this.reusable = false;
          this.finish(body);
        }
        return;
      }
      case "close": {
        this.received += buf.byteLength - at;
        if (this.received > this.limit) throw this.tooLarge();
        if (at < buf.byteLength) this.chunks.push(buf.subarray(at));
        return;
      }
      case "chunked":
        this.readChunks(buf, at);
    }
  }

  private readChunks(buf: Buffer, at: number): void {
    for (;;) {
      switch (this.chunkState) {
        case "size": {
          const eol = buf.indexOf("\r\n", at);
          if (eol < 0) return this.keep(buf, at, MAX_CHUNK_LINE_BYTES);
          const line = buf.toString("latin1", at, eol);
          const size = /^([0-9A-Fa-f]{1,12})[ \t]*(?:;.*)?$/.exec(line);
          if (!size) throw new Http1Error("the upstream answered a malformed chunk size", "answer", this.parsedHead!);
          at = eol + 2;
          this.chunkLeft = parseInt(size[1]!, 16);
          if (this.chunkLeft === 0) this.chunkState = "trailers";
          else {
            this.received += this.chunkLeft;
            if (this.received > this.limit) throw this.tooLarge();
            this.chunkState = "data";
          }
          break;
        }
        case "data": {
          const take = Math.min(this.chunkLeft, buf.byteLength - at);
          if (take > 0) this.chunks.push(buf.subarray(at, at + take));
          at += take;
          this.chunkLeft -= take;
          if (this.chunkLeft > 0) return;
          this.chunkState = "data-end";
          break;
        }
        case "data-end": {
          if (buf.byteLength - at < 2) return this.keep(buf, at, 2);
          if (buf[at] !== 13 || buf[at + 1] !== 10) throw new Http1Error("the upstream answered a malformed chunk", "answer", this.parsedHead!);
          at += 2;
          this.chunkState = "size";
          break;
        }
        case "trailers": {
          const eol = buf.indexOf("\r\n", at);
          if (eol < 0) return this.keep(buf, at, MAX_HEAD_BYTES - this.trailerBytes);
          const empty = eol === at;
          if (!empty) {
            // Trailers are read past, not used; they are held to the head's rules and size.
            const line = buf.toString("latin1", at, eol);
            const colon = line.indexOf(":");
            this.trailerBytes += line.length + 2;
            if (this.trailerBytes > MAX_HEAD_BYTES || colon <= 0 || !isToken(line, 0, colon) || HEADER_VALUE_FORBIDDEN.test(line)) {
              throw new Http1Error("the upstream answered a malformed chunked trailer", "answer", this.parsedHead!);
            }
          }
          at = eol + 2;
          if (empty) {
            if (at < buf.byteLength) this.reusable = false;
            this.finish(joinChunks(this.chunks, this.received));
            return;
          }
        }
      }
    }
  }

  /** The unfinished head with `data` added (the store grows by doubling): a view of its bytes. */
  private appendToHead(data: Buffer): Buffer {
    const needed = this.headUsed + data.byteLength;
    if (!this.headStore || this.headStore.byteLength < needed) {
      const grown = Buffer.allocUnsafe(Math.max(needed, 2 * (this.headStore?.byteLength ?? 0), 4096));
      if (this.headStore) this.headStore.copy(grown, 0, 0, this.headUsed);
      this.headStore = grown;
    }
    data.copy(this.headStore, this.headUsed);
    this.headUsed = needed;
    return this.headStore.subarray(0, this.headUsed);
  }

  /** Keeps the unparsed rest for the next data, within `max` bytes. */
  private keep(buf: Buffer, at: number, max: number): void {
    if (buf.byteLength - at > max) throw new Http1Error("the upstream answered a malformed chunked body", "answer", this.parsedHead!);
    this.pending = at < buf.byteLength ? Buffer.from(buf.subarray(at)) : null;
  }

  /** The answer is whole: hand it over, then park or close the connection. */
  private finish(raw: Uint8Array): void {
    const exchange = this.exchange!;
    const head = this.parsedHead!;
    this.exchange = null;
    let body: Uint8Array;
    try {
      body = decodeContent(raw, this.encoding, this.limit);
    } catch (e) {
      this.reusable = false;
      exchange.fail(
        e instanceof DecodedTooLarge
          ? new Http1Error(`upstream answer exceeds the limit of ${this.limit} bytes once decoded`, "answer", head, this.limit)
          : new Http1Error(`the upstream's ${this.encoding} body could not be decoded: ${errorText(e)}`, "answer", head),
      );
      this.release();
      this.resetAnswer();
      return;
    }
    // The answer may come before the whole request was written (a server refusing early): the
    // rest of the request would be read as the next one.
    if (this.unwritten) this.reusable = false;
    this.release();
    // Nothing of this answer stays with the connection once it is handed on.
    this.resetAnswer();
    exchange.succeed({ head, body });
  }

  /** Back to the idle list when the answer allowed it, else closed. */
  release(): void {
    if (this.closed) return;
    if (this.reusable && !this.exchange && !this.unwritten) park(this);
    else this.destroy();
  }

  /** A closed connection is not kept on the idle list (nor what it holds). */
  private leaveIdleList(): void {
    if (!this.parked) return;
    this.parked = false;
    const idle = this.origin.idle;
    const at = idle.lastIndexOf(this);
    if (at >= 0) idle.splice(at, 1);
  }

  peerEnded(): void {
    // A close-delimited body ends with the peer's FIN.
    if (this.exchange && this.parsedHead && this.mode === "close") {
      this.reusable = false;
      this.finish(joinChunks(this.chunks, this.received));
    }
  }

  closedBy(error?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.leaveIdleList();
    if (this.exchange && this.parsedHead && this.mode === "close" && !error) {
      this.finish(joinChunks(this.chunks, this.received));
      return;
    }
    const exchange = this.exchange;
    this.exchange = null;
    this.unwritten = null;
    exchange?.connectionLost(this, error ? `the upstream connection broke: ${errorText(error)}` : "the upstream closed the connection before the answer was complete");
  }

  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    this.leaveIdleList();
    this.exchange = null;
    this.unwritten = null;
    this.socket?.terminate();
  }
}

/** The body's parts as one array: the part itself when there is one (no copy). */
function joinChunks(chunks: Uint8Array[], total: number): Uint8Array {
  return chunks.length === 1 ? chunks[0]! : concatChunks(chunks, total);
}

class DecodedTooLarge extends Error {}

/** The body without its content coding, at most `limit` bytes decoded. */
function decodeContent(raw: Uint8Array, encoding: string, limit: number): Uint8Array {
  if (encoding === "" || encoding === "identity" || raw.byteLength === 0) return raw;
  const options = { maxOutputLength: Math.max(1, limit) };
  try {
    switch (encoding) {
      case "gzip":
      case "x-gzip":
        return gunzipSync(raw, options);
      case "deflate":
        // "deflate" is meant to be zlib-wrapped; some servers send it raw.
        return raw[0] !== undefined && (raw[0] & 0x0f) === 8 ? inflateSync(raw, options) : inflateRawSync(raw, options);
      case "br":
        return brotliDecompressSync(raw, options);
    }
  } catch (e) {
    if (e instanceof RangeError || (e as { code?: string }).code === "ERR_BUFFER_TOO_LARGE") throw new DecodedTooLarge();
    throw e;
  }
  throw new Error(`unsupported content coding ${JSON.stringify(encoding)}`);
}

function errorText(e: unknown): string {
  if (e instanceof Error) {
    const code = (e as { code?: unknown }).code;
    return typeof code === "string" && !e.message.includes(code) ? `${code}: ${e.message}` : e.message;
  }
  return String(e);
}
