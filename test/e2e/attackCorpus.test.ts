/**
 * A property-based corpus against the server as its own OS process (so its peak RSS can be
 * read): fast-check builds requests for every route from the shape of its schema, valid and
 * hostile values mixed, plus the known attacks (bombs, deep nesting, oversize declarations).
 * For every request: never a 5xx, never slower than 10 s, and a refused request never changes
 * the balance; at the end the server is healthy, its ledger sums to its balance, and its peak
 * RSS stayed under 500 MB.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { ATELIER_FROM_SOURCE, lastLine, runAtelier, startServerProcess, type ServerProcess } from "../support/process";
import { tempDir } from "../support/tempDirs";
import { dataUrl, makePng } from "../support/images";
import { interlacedZerosBomb, progressiveScanJpeg } from "../support/imageBombs";

const RUNS = 1000;
const SLOW_MS = 10_000;
const MAX_PEAK_RSS = 500 * 1024 * 1024;

let server: ServerProcess;
let dataDir: string;
let key: string;
let db: Database;

beforeAll(async () => {
  dataDir = tempDir("atelier-corpus-");
  const env = { ATELIER_DATA: dataDir };
  expect((await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "corpus@example.com", "--credits", "100000"], { env })).code).toBe(0);
  const created = await runAtelier(ATELIER_FROM_SOURCE, ["key", "create", "corpus@example.com", "--name", "corpus"], { env });
  key = lastLine(created.stdout);
  server = await startServerProcess(ATELIER_FROM_SOURCE, ["--port", "0", "--host", "127.0.0.1"], {
    env: { ...env, ATELIER_CONFIG: writeConfig() },
  });
  db = new Database(join(dataDir, "atelier.db"), { readonly: true });
});

afterAll(async () => {
  db?.close();
  await server?.stop();
});

function writeConfig(): string {
  const file = join(dataDir, "corpus.toml");
  // Requests run one after another; a small body limit keeps the corpus fast without changing what is checked.
  require("node:fs").writeFileSync(file, `[server]\nmax_body_bytes = ${24 * 1024 * 1024}\nlog_requests = false\n[limits]\nqueue_timeout_ms = 5000\n`);
  return file;
}

const balance = () => db.query<{ credits: number }, []>("SELECT credits FROM users WHERE email = 'corpus@example.com'").get()!.credits;
const ledgerSum = () => db.query<{ s: number }, []>("SELECT COALESCE(SUM(l.amount), 0) AS s FROM ledger l JOIN users u ON u.id = l.user_id WHERE u.email = 'corpus@example.com'").get()!.s;

function peakRss(pid: number): number {
  const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(hwm?.[1] ?? 0) * 1024;
}

// ---- the pieces requests are built from -------------------------------------------------

const smallPng = dataUrl(makePng(64, 64));
const hostileImages: string[] = [
  smallPng,
  dataUrl(interlacedZerosBomb(256 * 1024 * 1024)),
  dataUrl(progressiveScanJpeg(64, 64, 2000), "jpeg"),
  smallPng.slice(0, 60),
  "data:image/png;base64,!!!!",
  "data:image/gif;base64,R0lGODlhAQABAAAAACw=",
  `data:image/png;base64,${"A".repeat(4096)}`,
  "https://example.com/cat.png",
];

/** Any JSON-ish value, including deep and odd ones. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  { depthSize: "small" },
  fc.jsonValue({ maxDepth: 3 }),
  fc.string({ maxLength: 50 }),
  fc.integer(),
  fc.double(),
  fc.constantFrom(null, true, false, -1, 0, 1, 2, 1e308, "", "\u0000", "💥".repeat(100)),
);
/** Mostly a value of the right shape, sometimes anything at all. */
const maybe = <T>(arb: fc.Arbitrary<T>) => fc.oneof({ weight: 6, arbitrary: arb }, { weight: 1, arbitrary: anyValue });

/** Usually with the required fields present, sometimes with any of them missing. */
function recordOf<T extends Record<string, fc.Arbitrary<unknown>>>(fields: T, required: (keyof T & string)[]) {
  return fc.oneof({ weight: 4, arbitrary: fc.record(fields, { requiredKeys: required }) }, { weight: 1, arbitrary: fc.record(fields, { requiredKeys: [] }) });
}

const chatBody = recordOf(
  {
    model: maybe(fc.constantFrom("builtin-chat", "builtin-image", "nope", "")),
    messages: maybe(
      fc.array(
        fc.record(
          { role: maybe(fc.constantFrom("user", "system", "assistant", "developer", "tool")), content: maybe(fc.string({ maxLength: 200 })), name: anyValue },
          { requiredKeys: ["role", "content"] },
        ),
        { maxLength: 45 },
      ),
    ),
    temperature: maybe(fc.double({ min: -1, max: 3, noNaN: true })),
    max_tokens: anyValue,
    n: maybe(fc.constantFrom(1, 2)),
    stream: anyValue,
    response_format: maybe(fc.constantFrom({ type: "text" }, { type: "json_object" }, { type: "json_schema", json_schema: { name: "x", schema: { type: "object" } } })),
    user: anyValue,
  },
  ["model", "messages"],
);

const imageFields = {
  model: maybe(fc.constantFrom("builtin-image", "builtin-chat", "nope")),
  prompt: maybe(fc.oneof({ weight: 9, arbitrary: fc.string({ minLength: 1, maxLength: 80 }) }, { weight: 1, arbitrary: fc.constant("x".repeat(32_001)) })),
  size: maybe(fc.constantFrom("64x64", "96x128", "64x64", "96x128", "2049x64", "0x0", "64x64x64", "1e3x64")),
  quality: maybe(fc.constantFrom("auto", "low", "high", "ultra")),
  n: maybe(fc.constantFrom(1, 2)),
  response_format: maybe(fc.constantFrom("b64_json", "url")),
};

const generationsBody = recordOf({ ...imageFields, reference_images: maybe(fc.array(fc.constantFrom(...hostileImages), { maxLength: 3 })) }, ["prompt", "size"]);

const editsJsonBody = recordOf({ ...imageFields, image: maybe(fc.constantFrom(...hostileImages)), mask: maybe(fc.constantFrom(...hostileImages)) }, ["prompt", "image", "size"]);

interface CorpusRequest {
  label: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: BodyInit;
  /** Whether a 200 may cost one credit. */
  charges: boolean;
}

const authHeader = fc.constantFrom<"key" | "none" | "bad" | "malformed">("key", "key", "key", "key", "key", "none", "bad", "malformed");
function withAuth(kind: "key" | "none" | "bad" | "malformed", headers: Record<string, string> = {}): Record<string, string> {
  if (kind === "key") return { ...headers, authorization: `Bearer ${key}` };
  if (kind === "bad") return { ...headers, authorization: "Bearer sk-atl-0000000000000000000000000000000000000000000" };
  if (kind === "malformed") return { ...headers, authorization: "Basic Zm9vOmJhcg==" };
  return headers;
}

/** The body as sent: usually JSON, sometimes with a wrong content type, truncated or nested too deep. */
const jsonEncoding = fc.constantFrom("json", "json", "json", "json", "truncated", "text/plain", "deep", "empty");
function encodeJson(value: unknown, how: string): { body?: string; contentType?: string } {
  const text = JSON.stringify(value) ?? "null";
  if (how === "truncated") return { body: text.slice(0, Math.max(1, text.length - 3)), contentType: "application/json" };
  if (how === "text/plain") return { body: text, contentType: "text/plain" };
  if (how === "deep") return { body: `{"model":${"[".repeat(30_000)}${"]".repeat(30_000)}}`, contentType: "application/json" };
  if (how === "empty") return { body: "", contentType: "application/json" };
  return { body: text, contentType: "application/json" };
}

const jsonRoute = (path: string, body: fc.Arbitrary<unknown>, charges: boolean) =>
  fc.tuple(body, jsonEncoding, authHeader).map(([value, how, auth]): CorpusRequest => {
    const { body: text, contentType } = encodeJson(value, how);
    return { label: `POST ${path} (${how})`, method: "POST", path, headers: withAuth(auth, contentType ? { "content-type": contentType } : {}), body: text, charges };
  });

const multipartEdit = fc
  .tuple(
    fc.array(fc.constantFrom(...hostileImages), { maxLength: 3 }),
    fc.option(fc.constantFrom(...hostileImages)),
    fc.constantFrom("image", "image[]", "image[0]", "file"),
    fc.option(fc.string({ maxLength: 60 })),
    fc.option(fc.constantFrom("64x64", "auto", "5000x5000")),
    authHeader,
  )
  .map(([images, mask, field, prompt, size, auth]): CorpusRequest => {
    const form = new FormData();
    const asFile = (url: string, name: string) => {
      const comma = url.indexOf(",");
      const bytes = comma > 0 ? Buffer.from(url.slice(comma + 1), "base64") : Buffer.from(url);
      return new File([bytes], name, { type: "image/png" });
    };
    images.forEach((img, i) => form.append(field, asFile(img, `i${i}.png`)));
    if (mask) form.append("mask", asFile(mask, "mask.png"));
    if (prompt !== null) form.append("prompt", prompt);
    if (size !== null) form.append("size", size);
    return { label: `POST /v1/images/edits multipart (${field})`, method: "POST", path: "/v1/images/edits", headers: withAuth(auth), body: form, charges: true };
  });

const getRoute = fc
  .tuple(
    fc.constantFrom("/v1/models", "/v1/models/builtin-image", "/v1/models/%zz", "/v1/nothing", "/healthz", "/readyz", "/openapi.json", "/", "/signin", "/keys", "/admin/api/upstreams", "/requests?page=-1&status=%00"),
    fc.constantFrom("GET", "DELETE", "PUT", "OPTIONS"),
    authHeader,
  )
  .map(([path, method, auth]): CorpusRequest => ({ label: `${method} ${path}`, method, path, headers: withAuth(auth, method === "OPTIONS" ? { origin: "https://evil.example", "access-control-request-method": "POST" } : {}), charges: false }));

const workbenchForm = fc
  .tuple(fc.constantFrom("/signin", "/signup", "/setup", "/keys", "/signout"), fc.dictionary(fc.constantFrom("email", "password", "token", "name", "csrf"), fc.string({ maxLength: 300 })), fc.constantFrom("form", "json", "deep"))
  .map(([path, fields, how]): CorpusRequest => {
    const body = how === "form" ? new URLSearchParams(fields).toString() : how === "json" ? JSON.stringify(fields) : `{"email":${"[".repeat(20_000)}${"]".repeat(20_000)}}`;
    return { label: `POST ${path} (${how})`, method: "POST", path, headers: { "content-type": how === "form" ? "application/x-www-form-urlencoded" : "application/json", origin: server.url }, body, charges: false };
  });

/** Well-formed in every field but the images, which may be hostile: the decode path's share. */
const wellFormedGeneration = fc
  .tuple(fc.array(fc.constantFrom(...hostileImages), { maxLength: 2 }), fc.constantFrom("64x64", "96x128"), fc.string({ minLength: 1, maxLength: 40 }))
  .map(([refs, size, prompt]): CorpusRequest => ({
    label: "POST /v1/images/generations (well-formed)",
    method: "POST",
    path: "/v1/images/generations",
    headers: withAuth("key", { "content-type": "application/json" }),
    body: JSON.stringify({ model: "builtin-image", prompt, size, reference_images: refs }),
    charges: true,
  }));

const anyRequest = fc.oneof(
  { weight: 2, arbitrary: wellFormedGeneration },
  { weight: 4, arbitrary: jsonRoute("/v1/chat/completions", chatBody, false) },
  { weight: 4, arbitrary: jsonRoute("/v1/images/generations", generationsBody, true) },
  { weight: 2, arbitrary: jsonRoute("/v1/images/edits", editsJsonBody, true) },
  { weight: 2, arbitrary: multipartEdit },
  { weight: 2, arbitrary: getRoute },
  { weight: 2, arbitrary: workbenchForm },
);

// ---- running it --------------------------------------------------------------------------

const seen = { total: 0, byStatus: new Map<number, number>(), slowest: 0 };

async function send(req: CorpusRequest): Promise<void> {
  const before = balance();
  const started = performance.now();
  const res = await fetch(server.url + req.path, { method: req.method, headers: req.headers, body: req.body, signal: AbortSignal.timeout(SLOW_MS + 5000) });
  const text = await res.text();
  const took = performance.now() - started;
  seen.total++;
  seen.byStatus.set(res.status, (seen.byStatus.get(res.status) ?? 0) + 1);
  seen.slowest = Math.max(seen.slowest, took);
  const where = `${req.label} → ${res.status} ${text.slice(0, 300)}`;
  expect(res.status, where).toBeLessThan(500);
  expect(took, where).toBeLessThan(SLOW_MS);
  const spent = before - balance();
  expect(spent, where).toBe(req.charges && res.status === 200 ? 1 : 0);
  if (res.status >= 400 && res.headers.get("content-type")?.includes("application/json")) {
    const err = JSON.parse(text).error;
    expect(Object.keys(err).sort(), where).toEqual(["code", "message", "param", "type"]);
  }
}

test(
  `${RUNS} generated requests over every route: no 5xx, none slower than ${SLOW_MS / 1000} s, refused ones never charged, RSS bounded`,
  async () => {
    await fc.assert(fc.asyncProperty(anyRequest, send), { numRuns: RUNS, seed: Number(process.env.CORPUS_SEED ?? Date.now() % 2 ** 31), endOnFailure: true });
    // The known attacks, each once more at the end in case the generator did not pick them.
    for (const img of hostileImages) {
      await send({ label: "bomb as reference", method: "POST", path: "/v1/images/generations", headers: withAuth("key", { "content-type": "application/json" }), body: JSON.stringify({ prompt: "x", size: "64x64", reference_images: [img] }), charges: true });
    }
    const health = await fetch(server.url + "/healthz");
    expect(health.status).toBe(200);
    expect(balance()).toBe(ledgerSum());
    const rss = peakRss(server.proc.pid);
    console.log(`corpus: ${seen.total} requests, statuses ${JSON.stringify(Object.fromEntries(seen.byStatus))}, slowest ${Math.round(seen.slowest)} ms, server peak RSS ${Math.round(rss / 1048576)} MB`);
    expect(rss).toBeLessThan(MAX_PEAK_RSS);
  },
  600_000,
);
