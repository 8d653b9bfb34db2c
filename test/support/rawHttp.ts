/**
 * HTTP/1.1 over a plain socket, for what fetch() will not send: a Content-Length that does not
 * match the body, or a chunked body that keeps coming after the server has answered.
 */
import { connect, type Socket } from "node:net";

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

function parseResponse(text: string): RawResponse | null {
  const end = text.indexOf("\r\n\r\n");
  if (end < 0) return null;
  const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(":");
    headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  // `text` is latin1 (one char per byte), so lengths below are byte counts; decode UTF-8 at the end.
  let body = text.slice(end + 4);
  if (headers["content-length"] !== undefined) {
    const n = Number(headers["content-length"]);
    if (body.length < n) return null;
    body = body.slice(0, n);
  } else if (headers["transfer-encoding"] === "chunked") {
    let out = "";
    let rest = body;
    for (;;) {
      const nl = rest.indexOf("\r\n");
      if (nl < 0) return null;
      const size = parseInt(rest.slice(0, nl), 16);
      if (size === 0) break;
      if (rest.length < nl + 2 + size) return null;
      out += rest.slice(nl + 2, nl + 2 + size);
      rest = rest.slice(nl + 2 + size + 2);
    }
    body = out;
  }
  return { status: Number(statusLine!.split(" ")[1]), headers, body: Buffer.from(body, "latin1").toString("utf8") };
}

/**
 * Sends `head` (request line and headers, without the blank line), then the chunks from
 * `body` until the server answers or the chunks run out (an async iterable can pause between
 * chunks). Resolves with the parsed answer.
 */
export function rawRequest(
  baseUrl: string,
  head: string,
  body: Iterable<Uint8Array | string> | AsyncIterable<Uint8Array | string> = [],
): Promise<RawResponse> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    let received = "";
    let answered: RawResponse | null = null;
    const socket: Socket = connect({ host: hostname, port: Number(port) });
    const timer = setTimeout(() => finish(new Error(`no complete answer; got ${JSON.stringify(received.slice(0, 200))}`)), 20_000);
    const finish = (error?: Error) => {
      clearTimeout(timer);
      socket.destroy();
      if (answered) resolve(answered);
      else reject(error ?? new Error(`connection closed without a complete answer; got ${JSON.stringify(received.slice(0, 200))}`));
    };
    socket.on("data", (data) => {
      received += data.toString("latin1");
      answered = parseResponse(received);
      if (answered) finish();
    });
    socket.on("error", (e) => finish(e));
    socket.on("close", () => finish());
    socket.on("connect", async () => {
      socket.write(`${head}\r\n\r\n`);
      for await (const chunk of body) {
        if (answered || socket.destroyed) return;
        const ok = socket.write(chunk);
        if (!ok) await new Promise<void>((r) => socket.once("drain", () => r()));
        // Give the server a chance to answer before we send more.
        await new Promise<void>((r) => setImmediate(r));
      }
    });
  });
}

/** `count` chunks of `size` bytes each, framed for Transfer-Encoding: chunked (no terminator). */
export function* chunkedBody(size: number, count: number, byte = "a"): Generator<string> {
  const payload = byte.repeat(size);
  for (let i = 0; i < count; i++) yield `${size.toString(16)}\r\n${payload}\r\n`;
  yield "0\r\n\r\n";
}
