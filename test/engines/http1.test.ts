/**
 * The keep-alive HTTP/1.1 client of plain-http upstream calls (src/engines/http1.ts), against
 * raw TCP servers on loopback that write exactly the bytes each case needs: framing by length,
 * chunks and close; 1xx answers; limits on heads and bodies; connection reuse and the stale
 * connection retry; aborts; backpressure on a large request; content codings.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { gzipSync } from "node:zlib";
import type { Socket, TCPSocketListener } from "bun";
import { cancelViewOf, closeIdleHttp1Connections, Http1Error, http1Request, http1Target, resetHttp1ForTests, type Http1Request, type Http1Target } from "../../src/engines/http1";
import { callJson } from "../../src/engines/upstreamHttp";
import { AttemptFailure } from "../../src/engines/pool";
import { SecretRedactor } from "../../src/engines/redact";
import { until } from "../support/until";

/** What the raw server does with each request it reads whole: write bytes, optionally close. */
type Reply = (request: ReceivedRequest, socket: Socket<ConnState>, connection: ConnState) => void;

interface ReceivedRequest {
  head: string;
  body: Buffer;
}

interface ConnState {
  id: number;
  buffer: Buffer;
  served: number;
}

/** A raw HTTP/1.1 server: parses requests framed by Content-Length and answers each with `reply`. */
class RawServer {
  listener: TCPSocketListener<ConnState>;
  connections = 0;
  closedConnections = 0;
  requests: ReceivedRequest[] = [];
  reply: Reply = () => {};
  sockets = new Set<Socket<ConnState>>();

  constructor() {
    this.listener = Bun.listen<ConnState>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open: (socket) => {
          socket.data = { id: ++this.connections, buffer: Buffer.alloc(0), served: 0 };
          this.sockets.add(socket);
        },
        data: (socket, data) => {
          const conn = socket.data;
          conn.buffer = Buffer.concat([conn.buffer, data]);
          for (;;) {
            const end = conn.buffer.indexOf("\r\n\r\n");
            if (end < 0) return;
            const head = conn.buffer.toString("latin1", 0, end);
            const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
            if (conn.buffer.byteLength < end + 4 + length) return;
            const request = { head, body: Buffer.from(conn.buffer.subarray(end + 4, end + 4 + length)) };
            conn.buffer = conn.buffer.subarray(end + 4 + length);
            this.requests.push(request);
            this.reply(request, socket, conn);
            conn.served++;
          }
        },
        close: (socket) => {
          this.closedConnections++;
          this.sockets.delete(socket);
        },
      },
    });
  }

  /** Closes every open connection from the server's side (what an idle timeout does). */
  endAll(): void {
    for (const socket of this.sockets) socket.end();
  }

  url(path = "/v1/x"): Http1Target {
    return http1Target(`http://127.0.0.1:${this.listener.port}${path}`, undefined)!;
  }

  stop(): void {
    this.listener.stop(true);
  }
}

const JSON_ANSWER = '{"ok":true}';
function okAnswer(body = JSON_ANSWER, extra = ""): string {
  return `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
}

function send(url: Http1Target, overrides: Partial<Http1Request> & { signal?: AbortSignal } = {}): ReturnType<typeof http1Request> {
  const { signal = new AbortController().signal, ...rest } = overrides;
  return http1Request(url, { method: "POST", headers: { "content-type": "application/json" }, body: '{"q":1}', cancel: cancelViewOf(signal), limitFor: () => 1024 * 1024, ...rest });
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);
const tick = (ms: number) => Bun.sleep(ms);

let server: RawServer;
beforeAll(() => {
  server = new RawServer();
});
afterEach(() => {
  closeIdleHttp1Connections();
  server.requests = [];
  server.reply = () => {};
});
afterAll(() => server.stop());

describe("requests and framing", () => {
  test("writes the method, target, Host, Content-Length and the caller's headers; reads a Content-Length answer", async () => {
    server.reply = (_r, s) => s.write(okAnswer());
    const answer = await send(server.url("/v1/chat/completions?x=1"), { headers: { "content-type": "application/json", authorization: "Bearer sk-test" }, body: '{"prompt":"kettle é"}' });
    expect(answer.head.status).toBe(200);
    expect(text(answer.body)).toBe(JSON_ANSWER);
    expect(answer.head.headers.get("content-type")).toBe("application/json");
    const { head, body } = server.requests[0]!;
    const lines = head.split("\r\n");
    expect(lines[0]).toBe("POST /v1/chat/completions?x=1 HTTP/1.1");
    expect(lines).toContain(`Host: 127.0.0.1:${server.listener.port}`);
    expect(lines).toContain("authorization: Bearer sk-test");
    expect(lines).toContain(`Content-Length: ${Buffer.byteLength('{"prompt":"kettle é"}')}`);
    expect(lines).toContain("Accept-Encoding: identity");
    expect(body.toString()).toBe('{"prompt":"kettle é"}');
  });

  test("a POST without a body says Content-Length: 0", async () => {
    server.reply = (_r, s) => s.write(okAnswer());
    await send(server.url("/empty"), { body: undefined });
    expect(server.requests[0]!.head.split("\r\n")).toContain("Content-Length: 0");
  });

  test("a GET sends no body and no Content-Length", async () => {
    server.reply = (_r, s) => s.write(okAnswer());
    await send(server.url("/status"), { method: "GET", body: undefined });
    expect(server.requests[0]!.head.startsWith("GET /status HTTP/1.1\r\n")).toBe(true);
    expect(server.requests[0]!.head.toLowerCase()).not.toContain("content-length");
  });

  test("a chunked answer written a byte at a time, with chunk extensions and trailers, is joined exactly", async () => {
    const payload = JSON.stringify({ text: "x".repeat(300), emoji: "🫖" });
    const a = payload.slice(0, 100);
    const b = payload.slice(100);
    const wire = `HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n${Buffer.byteLength(a).toString(16)};ext=1\r\n${a}\r\n${Buffer.byteLength(b).toString(16)}\r\n${b}\r\n0\r\nX-Trailer: yes\r\n\r\n`;
    server.reply = async (_r, s) => {
      const bytes = Buffer.from(wire);
      for (let i = 0; i < bytes.byteLength; i += 7) {
        s.write(bytes.subarray(i, i + 7));
        s.flush();
        await tick(0);
      }
    };
    const answer = await send(server.url());
    expect(text(answer.body)).toBe(payload);
    // The connection is reused: the chunked framing ended where the answer ended.
    server.reply = (_r, s) => s.write(okAnswer());
    await send(server.url());
    expect(new Set(server.requests.map(() => server.connections)).size).toBe(1);
  });

  test("an answer without length or chunks ends with the connection, which is not reused", async () => {
    const before = server.connections;
    server.reply = (_r, s) => {
      s.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"closed\":");
      setTimeout(() => s.end("true}"), 5);
    };
    const answer = await send(server.url());
    expect(text(answer.body)).toBe('{"closed":true}');
    server.reply = (_r, s) => s.write(okAnswer());
    await send(server.url());
    expect(server.connections - before).toBe(2);
  });

  test("heads that arrive a few bytes at a time (a 1xx and the final one, 20 KiB of fields) are read whole", async () => {
    const fields = Array.from({ length: 400 }, (_, i) => `X-Field-${i}: ${"v".repeat(40)}\r\n`).join("");
    const answer = `HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n${fields}Content-Type: application/json\r\nContent-Length: ${JSON_ANSWER.length}\r\n\r\n${JSON_ANSWER}`;
    // Cut into uneven pieces, and every end of a head (\r\n\r\n) cut after each of its bytes,
    // so that it straddles reads.
    const cuts = new Set<number>();
    for (let at = 0, n = 1; at < answer.length; at += n, n = (n * 7) % 97 || 1) cuts.add(at);
    for (let end = answer.indexOf("\r\n\r\n"); end >= 0; end = answer.indexOf("\r\n\r\n", end + 1)) for (const k of [1, 2, 3]) cuts.add(end + k);
    const points = [...cuts, answer.length].sort((a, b) => a - b);
    server.reply = async (_r, s) => {
      // Each piece its own write after a pause, so that the client reads them apart.
      for (let i = 0; i + 1 < points.length; i++) {
        s.write(answer.slice(points[i], points[i + 1]));
        await tick(1);
      }
    };
    const res = await send(server.url("/slow-head"));
    expect(res.head.status).toBe(200);
    expect(res.head.headers.get("x-field-399")).toBe("v".repeat(40));
    expect(text(res.body)).toBe(JSON_ANSWER);
  });

  test("1xx answers before the final one are skipped", async () => {
    server.reply = (_r, s) => s.write(`HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n${okAnswer()}`);
    const answer = await send(server.url());
    expect(answer.head.status).toBe(200);
    expect(text(answer.body)).toBe(JSON_ANSWER);
  });

  test("204 has no body even with a Content-Length; the connection stays usable", async () => {
    server.reply = (r, s) => s.write(r.head.startsWith("GET") ? okAnswer() : "HTTP/1.1 204 No Content\r\n\r\n");
    expect((await send(server.url())).body.byteLength).toBe(0);
    expect(text((await send(server.url(), { method: "GET", body: undefined })).body)).toBe(JSON_ANSWER);
  });

  test("gzip, deflate and br answers are decoded", async () => {
    const zlib = await import("node:zlib");
    for (const [coding, encode] of [
      ["gzip", zlib.gzipSync],
      ["deflate", zlib.deflateSync],
      ["br", zlib.brotliCompressSync],
    ] as const) {
      const packed = encode(Buffer.from(JSON_ANSWER));
      server.reply = (_r, s) => s.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Encoding: ${coding}\r\nContent-Length: ${packed.byteLength}\r\n\r\n`), packed]));
      expect(text((await send(server.url())).body)).toBe(JSON_ANSWER);
    }
  });

  test("a header value with a line break is refused before anything is sent", async () => {
    const count = server.requests.length;
    expect(() => send(server.url(), { headers: { "x-bad": "a\r\nInjected: yes" } })).toThrow(TypeError);
    await tick(20);
    expect(server.requests.length).toBe(count);
  });

  test("a request body of 8 MiB is written whole through backpressure", async () => {
    server.reply = (r, s) => s.write(okAnswer(JSON.stringify({ length: r.body.byteLength, last: r.body.toString("latin1", r.body.byteLength - 2) })));
    const body = `"${"é".repeat(4 * 1024 * 1024 - 2)}x"`;
    const answer = await send(server.url(), { body });
    expect(JSON.parse(text(answer.body))).toEqual({ length: Buffer.byteLength(body), last: 'x"' });
  });
});

describe("connections", () => {
  test("consecutive requests share one keep-alive connection", async () => {
    server.reply = (_r, s) => s.write(okAnswer());
    const before = server.connections;
    for (let i = 0; i < 5; i++) await send(server.url());
    expect(server.connections - before).toBe(1);
  });

  test("concurrent requests use one connection each, then reuse them", async () => {
    server.reply = (_r, s) => setTimeout(() => s.write(okAnswer()), 10);
    const before = server.connections;
    await Promise.all(Array.from({ length: 4 }, () => send(server.url())));
    await Promise.all(Array.from({ length: 4 }, () => send(server.url())));
    expect(server.connections - before).toBe(4);
  });

  test("a GET on a reused connection the server closes without answering: sent once more on a new one", async () => {
    server.reply = (_r, s, conn) => {
      if (conn.served === 0) s.write(okAnswer());
      else s.end(); // closed idle as the request arrived: it was never answered
    };
    const before = server.connections;
    await send(server.url(), { method: "GET", body: undefined });
    const answer = await send(server.url(), { method: "GET", body: undefined });
    expect(text(answer.body)).toBe(JSON_ANSWER);
    expect(server.connections - before).toBe(2);
  });

  test("a POST on a reused connection the server read, held and dropped without answering: not sent again, the call fails", async () => {
    server.reply = (_r, s, conn) => {
      if (conn.served === 0) s.write(okAnswer());
      else setTimeout(() => s.end(), 100); // worked on it (a generation), then the worker died
    };
    const before = server.requests.length;
    await send(server.url());
    const error = await send(server.url()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Http1Error);
    expect((error as Http1Error).stage).toBe("request");
    // Twice in all: the first call and the dropped one, never a third (a second billed generation).
    expect(server.requests.length - before).toBe(2);
  });

  test("an idle connection the server closes leaves the idle list; a parked one holds nothing of its last answer", async () => {
    server.reply = (_r, s) => s.write(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n`);
    const target = server.url("/idle-list");
    await Promise.all([send(target), send(target), send(target)]);
    const idle = target.origin.idle as unknown as Array<Record<string, unknown>>;
    expect(idle.length).toBe(3);
    for (const conn of idle) expect({ chunks: (conn.chunks as unknown[]).length, head: conn.parsedHead, pending: conn.pending }).toEqual({ chunks: 0, head: null, pending: null });
    server.endAll();
    await until(() => target.origin.idle.length === 0, "the closed connections to leave the idle list");
    expect(target.origin.idle.length).toBe(0);
  });

  test("a connection opened for a request aborted meanwhile is parked; closed by the server before answering the next GET, that one is retried", async () => {
    const before = server.connections;
    server.reply = (_r, s, conn) => {
      if (conn.id === before + 1) s.end();
      else s.write(okAnswer());
    };
    const controller = new AbortController();
    const aborted = send(server.url("/abort-connect"), { signal: controller.signal });
    controller.abort(new Error("stop"));
    expect(await aborted.catch((e: Error) => e.message)).toBe("stop");
    await tick(20);
    const answer = await send(server.url("/abort-connect"), { method: "GET", body: undefined });
    expect(text(answer.body)).toBe(JSON_ANSWER);
    expect(server.connections - before).toBe(2);
  });

  test("a new connection closed without an answer fails (no retry loop)", async () => {
    server.reply = (_r, s) => s.end();
    const before = server.requests.length;
    const error = await send(server.url()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Http1Error);
    expect((error as Http1Error).stage).toBe("request");
    expect(server.requests.length - before).toBe(1);
  });

  test("a connection broken in the middle of the body fails at the answer stage, with the status", async () => {
    server.reply = (_r, s) => {
      s.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":");
      setTimeout(() => s.end(), 5);
    };
    const error = (await send(server.url()).catch((e: unknown) => e)) as Http1Error;
    expect(error).toBeInstanceOf(Http1Error);
    expect(error.stage).toBe("answer");
    expect(error.head?.status).toBe(200);
  });

  test("bytes after the answer: the connection is not trusted again", async () => {
    server.reply = (_r, s) => s.write(okAnswer() + "HTTP/1.1 200 OK\r\n");
    const before = server.connections;
    await send(server.url());
    server.reply = (_r, s) => s.write(okAnswer());
    await send(server.url());
    expect(server.connections - before).toBe(2);
  });

  test("an answer that comes before the request is written (an early refusal) is read, and the connection closed", async () => {
    const early = new RawServer();
    try {
      early.listener.reload({
        socket: {
          open: (socket) => {
            socket.data = { id: ++early.connections, buffer: Buffer.alloc(0), served: 0 };
          },
          data: (socket) => {
            if (socket.data.served++ === 0) socket.end('HTTP/1.1 413 Payload Too Large\r\nContent-Length: 17\r\n\r\n{"error":"large"}');
          },
          close: () => {
            early.closedConnections++;
          },
        },
      });
      const answer = await send(early.url(), { body: "x".repeat(32 * 1024 * 1024) });
      expect(answer.head.status).toBe(413);
      expect(text(answer.body)).toBe('{"error":"large"}');
    } finally {
      early.stop();
    }
  });

  test("an abort rejects with the signal's reason and closes the connection", async () => {
    server.reply = () => {}; // never answers
    const controller = new AbortController();
    const closedBefore = server.closedConnections;
    const requestsBefore = server.requests.length;
    const pending = send(server.url(), { signal: controller.signal });
    // Aborted once the server has the request (on a connection of its own, not a parked one).
    await until(() => server.requests.length > requestsBefore, "the server to receive the request");
    const reason = new DOMException("stop", "TimeoutError");
    controller.abort(reason);
    expect(await pending.catch((e: unknown) => e)).toBe(reason);
    await until(() => server.closedConnections - closedBefore >= 1, "the connection to close");
    expect(server.closedConnections - closedBefore).toBe(1);
  });

  test("an already aborted signal sends nothing", async () => {
    const before = server.requests.length;
    const controller = new AbortController();
    controller.abort(new Error("gone"));
    expect(await send(server.url(), { signal: controller.signal }).catch((e: Error) => e.message)).toBe("gone");
    await tick(20);
    expect(server.requests.length).toBe(before);
  });

  test("a refused connection fails at the request stage", async () => {
    const gone = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = gone.port;
    gone.stop(true);
    const error = (await send(http1Target(`http://127.0.0.1:${port}/v1/x`, undefined)!).catch((e: unknown) => e)) as Http1Error;
    expect(error).toBeInstanceOf(Http1Error);
    expect(error.stage).toBe("request");
  });
});

describe("bounds", () => {
  test("a declared body over the limit is refused before it is read, with its status", async () => {
    server.reply = (_r, s) => s.write(`HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n`);
    const error = (await send(server.url(), { limitFor: () => 4096 }).catch((e: unknown) => e)) as Http1Error;
    expect(error.head?.status).toBe(200);
    expect(error.tooLarge).toBe(4096);
  });

  test("a chunked or close-delimited body over the limit fails as it passes the limit", async () => {
    server.reply = (_r, s) => s.write(`HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n${"a".repeat(2048)}\r\n800\r\n${"a".repeat(2048)}\r\n801\r\n`);
    expect(((await send(server.url(), { limitFor: () => 4096 }).catch((e: unknown) => e)) as Http1Error).tooLarge).toBe(4096);
    server.reply = (_r, s) => s.write(`HTTP/1.1 200 OK\r\n\r\n${"b".repeat(5000)}`);
    expect(((await send(server.url(), { limitFor: () => 4096 }).catch((e: unknown) => e)) as Http1Error).tooLarge).toBe(4096);
  });

  test("a compressed body is bounded by what it decodes to", async () => {
    const bomb = gzipSync(Buffer.alloc(10 * 1024 * 1024));
    server.reply = (_r, s) => s.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: ${bomb.byteLength}\r\n\r\n`), bomb]));
    const error = (await send(server.url(), { limitFor: () => 64 * 1024 }).catch((e: unknown) => e)) as Http1Error;
    expect(error).toBeInstanceOf(Http1Error);
    expect(error.message).toContain("exceeds the limit");
  });

  test("a head over 64 KiB, a status line that is not HTTP, a malformed chunk: protocol errors", async () => {
    const cases: [wire: string, message: string][] = [
      [`HTTP/1.1 200 OK\r\nX-Big: ${"h".repeat(70 * 1024)}\r\n\r\n`, "exceeds 65536 bytes"],
      ["SSH-2.0-OpenSSH\r\n\r\n", "did not answer in HTTP/1.x"],
      ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"],
      ["HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 0\r\n\r\n", "malformed header value"],
      ["HTTP/1.1 200 OK\r\nX-A: 1\r\n folded: 2\r\nContent-Length: 0\r\n\r\n", "malformed header line"],
      ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX: a\nb\r\n\r\n", "malformed chunked trailer"],
      ["HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", "invalid Content-Length"],
    ];
    for (const [wire, message] of cases) {
      server.reply = (_r, s) => s.write(wire);
      expect(((await send(server.url()).catch((e: unknown) => e)) as Error).message).toContain(message);
    }
  });
});

describe("which calls take this client", () => {
  test("plain http with a string body or none; not https, not a form, not credentials in the URL, not behind a proxy", () => {
    expect(http1Target("http://127.0.0.1:1/v1/x?a=1", "{}")?.line).toBe(" /v1/x?a=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n");
    expect(http1Target("http://127.0.0.1:1/v1/x", undefined)).not.toBeNull();
    expect(http1Target("https://api.openai.com/v1/x", "{}")).toBeNull();
    expect(http1Target("http://127.0.0.1:1/v1/x", new FormData())).toBeNull();
    expect(http1Target("http://user:pw@127.0.0.1:1/v1/x", "{}")).toBeNull();
    const saved = process.env.HTTP_PROXY;
    process.env.HTTP_PROXY = "http://proxy.local:3128";
    resetHttp1ForTests();
    try {
      expect(http1Target("http://127.0.0.1:1/v1/x", "{}")).toBeNull();
    } finally {
      if (saved === undefined) delete process.env.HTTP_PROXY;
      else process.env.HTTP_PROXY = saved;
      resetHttp1ForTests();
    }
  });
});

describe("callJson over this client", () => {
  const redactor = new SecretRedactor(["sk-secret-value"]);
  const call = (url: Http1Target, extra: Record<string, unknown> = {}) => callJson({ url: url.href, headers: { "content-type": "application/json" }, body: "{}", signal: new AbortController().signal, redactor, now: () => 0, ...extra });

  test("a redirect is followed (through fetch), the answer parsed", async () => {
    const target = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: async (req) => Response.json({ moved: true, got: await req.text() }) });
    try {
      server.reply = (_r, s) => s.write(`HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:${target.port}/new\r\nContent-Length: 0\r\n\r\n`);
      expect(await call(server.url())).toEqual({ moved: true, got: "{}" });
      // One whose body is larger than an error's 64 KiB is followed all the same.
      server.reply = (_r, s) => s.write(`HTTP/1.1 308 Permanent Redirect\r\nLocation: http://127.0.0.1:${target.port}/new\r\nContent-Length: ${100 * 1024}\r\n\r\n`);
      expect(await call(server.url("/big-redirect"))).toEqual({ moved: true, got: "{}" });
    } finally {
      target.stop(true);
    }
  });

  test("429 with retry-after-ms is rate_limited with the hint; the upstream's words are redacted", async () => {
    server.reply = (_r, s) => s.write(`HTTP/1.1 429 Too Many Requests\r\nretry-after-ms: 1500\r\nContent-Length: 48\r\n\r\n{"error":{"message":"slow down sk-secret-value"}}`);
    const failure = (await call(server.url()).catch((e: unknown) => e)) as AttemptFailure;
    expect(failure).toBeInstanceOf(AttemptFailure);
    expect(failure.kind).toBe("rate_limited");
    expect(failure.retryAfterMs).toBe(1500);
    expect(failure.message).not.toContain("sk-secret-value");
  });

  test("an error answer too large to read is still refused by its status", async () => {
    server.reply = (_r, s) => s.write(`HTTP/1.1 503 Service Unavailable\r\nContent-Length: ${200 * 1024}\r\n\r\n`);
    const failure = (await call(server.url()).catch((e: unknown) => e)) as AttemptFailure;
    expect(failure.kind).toBe("failed");
    expect(failure.message).toContain("upstream answered 503");
  });

  test("a body broken mid-way is a failed attempt naming the broken connection; a refused port names the reach", async () => {
    server.reply = (_r, s) => {
      s.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{");
      setTimeout(() => s.end(), 5);
    };
    expect(((await call(server.url()).catch((e: unknown) => e)) as Error).message).toContain("the upstream connection broke while reading its answer");
    const gone = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = gone.port;
    gone.stop(true);
    expect(((await call(http1Target(`http://127.0.0.1:${port}/x`, undefined)!).catch((e: unknown) => e)) as Error).message).toContain("could not reach the upstream");
  });
});
