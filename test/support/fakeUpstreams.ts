/**
 * Fake upstreams for the engine and pool tests: real Bun.serve servers on loopback that speak
 * the OpenAI API or the Stable Diffusion WebUI API, record every request they receive, count
 * concurrent requests per account, and inject faults on demand.
 *
 * Accounts are told apart by their credentials (the Bearer key, or the basic-auth user).
 */
import type { Server } from "bun";
import { makePng } from "./images";

export type Fault =
  | { kind: "429"; retryAfter?: string; retryAfterMs?: string }
  | { kind: "status"; status: number; message?: string }
  | { kind: "hang" }
  | { kind: "malformed" }
  | { kind: "reset" }
  | { kind: "not-image" }
  | { kind: "url" }
  | { kind: "delay"; ms: number };

export interface ReceivedPart {
  name: string;
  filename: string | null;
  type: string;
  bytes: Uint8Array;
}

export interface Received {
  method: string;
  path: string;
  account: string;
  authorization: string | null;
  json?: Record<string, unknown>;
  fields?: Record<string, string[]>;
  files?: ReceivedPart[];
}

export interface FakeUpstream {
  url: string;
  received: Received[];
  /** Highest number of concurrent requests each account saw. */
  maxConcurrent: Map<string, number>;
  /** The next requests of `account` get these faults, in order; then normal answers. */
  queueFaults(account: string, ...faults: Fault[]): void;
  /** Every request of `account` gets this fault until cleared (undefined clears). */
  alwaysFault(account: string, fault: Fault | undefined): void;
  /** Every successful answer first waits this long (for burst tests). */
  setLatency(ms: number): void;
  /** The revised_prompt the OpenAI fake answers with (undefined: none). */
  setRevisedPrompt(text: string | undefined): void;
  reset(): void;
  stop(): Promise<void>;
}

interface Behaviour {
  /** The revised_prompt an OpenAI fake adds to image answers. */
  revised?: string;
  answer(req: Received, request: Request, origin: string): Response | Promise<Response>;
}

function accountOf(authorization: string | null): string {
  if (!authorization) return "(none)";
  const bearer = /^Bearer\s+(.+)$/i.exec(authorization);
  if (bearer) return bearer[1]!;
  const basic = /^Basic\s+(.+)$/i.exec(authorization);
  if (basic) return Buffer.from(basic[1]!, "base64").toString("utf8").split(":")[0]!;
  return authorization;
}

function startFake(behaviour: Behaviour): FakeUpstream {
  const received: Received[] = [];
  const inFlight = new Map<string, number>();
  const maxConcurrent = new Map<string, number>();
  const queued = new Map<string, Fault[]>();
  const always = new Map<string, Fault>();
  let latency = 0;
  const hanging = new Set<() => void>();

  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 30,
    async fetch(request) {
      const url = new URL(request.url);
      if (url.pathname.startsWith("/files/")) return behaviour.answer({ method: "GET", path: url.pathname, account: "(download)", authorization: null }, request, url.origin);
      const authorization = request.headers.get("authorization");
      const account = accountOf(authorization);
      const rec: Received = { method: request.method, path: url.pathname, account, authorization };
      const type = request.headers.get("content-type") ?? "";
      if (type.includes("multipart/form-data")) {
        const form = await request.formData();
        rec.fields = {};
        rec.files = [];
        for (const [name, value] of form.entries() as Iterable<[string, string | File]>) {
          if (typeof value === "string") (rec.fields[name] ??= []).push(value);
          else rec.files.push({ name, filename: value.name ?? null, type: value.type, bytes: new Uint8Array(await value.arrayBuffer()) });
        }
      } else if (request.method === "POST") {
        rec.json = (await request.json()) as Record<string, unknown>;
      }
      received.push(rec);
      const now = (inFlight.get(account) ?? 0) + 1;
      inFlight.set(account, now);
      maxConcurrent.set(account, Math.max(maxConcurrent.get(account) ?? 0, now));
      try {
        const q = queued.get(account);
        const fault = q && q.length > 0 ? q.shift() : always.get(account);
        if (fault?.kind === "delay") await Bun.sleep(fault.ms);
        else if (fault) return await faultResponse(fault, request, url.origin, rec);
        if (latency > 0) await Bun.sleep(latency);
        return await behaviour.answer(rec, request, url.origin);
      } finally {
        inFlight.set(account, (inFlight.get(account) ?? 1) - 1);
      }
    },
  });

  async function faultResponse(fault: Fault, request: Request, origin: string, rec: Received): Promise<Response> {
    switch (fault.kind) {
      case "429": {
        const headers: Record<string, string> = { "content-type": "application/json" };
        if (fault.retryAfter) headers["retry-after"] = fault.retryAfter;
        if (fault.retryAfterMs) headers["retry-after-ms"] = fault.retryAfterMs;
        return new Response(JSON.stringify({ error: { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" } }), { status: 429, headers });
      }
      case "status":
        return Response.json({ error: { message: fault.message ?? `fake error ${fault.status}`, type: "invalid_request_error", code: null } }, { status: fault.status });
      case "hang":
        // Answers only when the client gives up (or after 10 s, so a broken test cannot leak forever).
        await new Promise<void>((resolve) => {
          const done = () => {
            hanging.delete(done);
            resolve();
          };
          hanging.add(done);
          request.signal.addEventListener("abort", done, { once: true });
          setTimeout(done, 10_000);
        });
        return new Response("too late", { status: 504 });
      case "malformed":
        return new Response('{"data": [{"b64_json": "iVBOR', { status: 200, headers: { "content-type": "application/json" } });
      case "reset": {
        // Headers promise a body that never fully arrives: the connection is torn down mid-answer.
        const body = new ReadableStream<Uint8Array>({
          start(c) {
            c.enqueue(new TextEncoder().encode('{"data":['));
            setTimeout(() => c.error(new Error("fake connection reset")), 2);
          },
        });
        return new Response(body, { status: 200, headers: { "content-type": "application/json", "content-length": "4096" } });
      }
      case "not-image":
        return behaviour.answer({ ...rec, path: `${rec.path}#not-image` }, request, origin);
      case "url":
        return behaviour.answer({ ...rec, path: `${rec.path}#url` }, request, origin);
      case "delay":
        return behaviour.answer(rec, request, origin);
    }
  }

  return {
    url: `http://127.0.0.1:${server.port}`,
    received,
    maxConcurrent,
    queueFaults: (account, ...faults) => queued.set(account, [...(queued.get(account) ?? []), ...faults]),
    alwaysFault: (account, fault) => (fault ? always.set(account, fault) : always.delete(account)),
    setLatency: (ms) => {
      latency = ms;
    },
    setRevisedPrompt: (text) => {
      behaviour.revised = text;
    },
    reset() {
      received.length = 0;
      maxConcurrent.clear();
      queued.clear();
      always.clear();
      latency = 0;
      behaviour.revised = undefined;
    },
    async stop() {
      for (const h of [...hanging]) h();
      await server.stop(true);
    },
  };
}

function sizeOf(value: unknown, fallback = 32): { width: number; height: number } {
  const m = typeof value === "string" ? /^(\d+)x(\d+)$/.exec(value) : null;
  return m ? { width: Number(m[1]), height: Number(m[2]) } : { width: fallback, height: fallback };
}

/** An OpenAI-compatible fake under /v1 (chat completions, image generations and edits). */
export function startFakeOpenAI(): FakeUpstream {
  const downloads = new Map<string, Uint8Array>();
  let n = 0;
  const behaviour: Behaviour = {
    answer(req, _request, origin) {
      if (req.path.startsWith("/files/")) {
        const bytes = downloads.get(req.path);
        return bytes ? new Response(bytes as Uint8Array<ArrayBuffer>, { headers: { "content-type": "image/png" } }) : new Response("gone", { status: 404 });
      }
      const [path, variant] = req.path.split("#");
      if (path === "/v1/chat/completions") {
        const messages = (req.json?.messages as { content: string }[] | undefined) ?? [];
        return Response.json({
          id: "chatcmpl-fake",
          object: "chat.completion",
          created: 1,
          model: String(req.json?.model),
          choices: [{ index: 0, message: { role: "assistant", content: `echo: ${messages.at(-1)?.content ?? ""}` }, finish_reason: "stop" }],
          usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
        });
      }
      if (path === "/v1/images/generations" || path === "/v1/images/edits") {
        const size = sizeOf(req.json?.size ?? req.fields?.size?.[0]);
        const png = makePng(size.width, size.height, (x, y) => [x % 256, y % 256, 99, 255]);
        const item: Record<string, unknown> = {};
        if (variant === "not-image") item.b64_json = Buffer.from("this is not an image at all").toString("base64");
        else if (variant === "url") {
          const file = `/files/${++n}.png`;
          downloads.set(file, png);
          item.url = `${origin}${file}`;
        } else item.b64_json = Buffer.from(png).toString("base64");
        if (behaviour.revised !== undefined) item.revised_prompt = behaviour.revised;
        return Response.json({ created: 1, data: [item] });
      }
      return Response.json({ error: { message: `no route ${req.path}` } }, { status: 404 });
    },
  };
  return startFake(behaviour);
}

/** A Stable Diffusion WebUI fake (/sdapi/v1/txt2img and /sdapi/v1/img2img). */
export function startFakeWebUI(): FakeUpstream {
  const behaviour: Behaviour = {
    answer(req) {
      const [path, variant] = req.path.split("#");
      if (path === "/sdapi/v1/txt2img" || path === "/sdapi/v1/img2img") {
        const w = Number(req.json?.width ?? 64);
        const h = Number(req.json?.height ?? 64);
        const image = variant === "not-image" ? Buffer.from("garbage").toString("base64") : Buffer.from(makePng(w, h, () => [10, 200, 30, 255])).toString("base64");
        return Response.json({ images: [image], parameters: {}, info: "{}" });
      }
      return Response.json({ detail: "Not Found" }, { status: 404 });
    },
  };
  return startFake(behaviour);
}
