/**
 * The API document: the committed openapi/openapi.json is exactly what the service serves with
 * the default configuration, it is valid OpenAPI, every /v1 operation is fully described, and
 * Swagger UI at /docs is served from the binary itself (no CDN).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import SwaggerParser from "@apidevtools/swagger-parser";
import { join } from "node:path";
import { loadConfig } from "../../src/config";
import { renderOpenApi } from "../../src/main";
import { startTestServer, type TestServer } from "../support/server";

const COMMITTED = join(import.meta.dir, "../../openapi/openapi.json");

type Json = Record<string, unknown>;
interface Operation {
  summary?: string;
  description?: string;
  tags?: string[];
  security?: Record<string, string[]>[];
  operationId?: string;
  requestBody?: { content: Record<string, { schema: Json }> };
  responses: Record<string, { description?: string; content?: Record<string, { schema: Json; examples?: Record<string, { summary?: string; value: { error: Json } }> }> }>;
}
interface Document {
  openapi: string;
  info: { version: string };
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Json>; securitySchemes: Record<string, Json> };
}

let server: TestServer;
let served: Document;
let servedText: string;

beforeAll(async () => {
  server = await startTestServer();
  const res = await fetch(`${server.url}/openapi.json`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("application/json");
  servedText = await res.text();
  served = JSON.parse(servedText) as Document;
});
afterAll(() => server.close());

/** The first line where two pretty-printed documents differ, to say what drifted. */
function firstDifference(a: string, b: string): string {
  const x = a.split("\n");
  const y = b.split("\n");
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] !== y[i]) return `line ${i + 1}: committed ${JSON.stringify(x[i] ?? "(end)")} vs served ${JSON.stringify(y[i] ?? "(end)")}`;
  }
  return "no difference";
}

const allOperations = () =>
  Object.entries(served.paths).flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ path, name: `${method.toUpperCase()} ${path}`, op })));

const v1Operations = () =>
  Object.entries(served.paths)
    .filter(([path]) => path.startsWith("/v1/"))
    .flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ name: `${method.toUpperCase()} ${path}`, op })));

function resolve(schema: Json): Json {
  const ref = schema.$ref;
  if (typeof ref !== "string") return schema;
  return served.components.schemas[ref.replace("#/components/schemas/", "")] ?? {};
}

describe("OpenAPI document", () => {
  test("openapi/openapi.json is exactly what the server serves (run `bun run openapi` after changing the API)", async () => {
    const committed = await Bun.file(COMMITTED).text();
    const expected = `${JSON.stringify(served, null, 2)}\n`;
    if (committed !== expected) {
      throw new Error(
        `openapi/openapi.json is out of date with the served /openapi.json — run \`bun run openapi\` and commit the result (${firstDifference(committed, expected)})`,
      );
    }
  });

  test("`atelier openapi` prints the same document", async () => {
    expect(await renderOpenApi(loadConfig({ env: {} }))).toBe(JSON.stringify(served, null, 2));
  });

  test("does not depend on which routes were called before it, in this app or another", async () => {
    const other = await startTestServer();
    try {
      // Calling a route makes Elysia compile it, which touches the shared models.
      for (const [path, item] of Object.entries(served.paths)) {
        for (const method of Object.keys(item)) {
          const res = await fetch(`${other.url}${path.replace(/\{[^}]+\}/g, "x")}`, { method: method.toUpperCase(), headers: { "content-type": "application/json" }, body: method === "get" ? undefined : "{}" });
          await res.arrayBuffer();
        }
      }
      expect(await (await fetch(`${other.url}/openapi.json`)).json()).toEqual(served);
      // Nor on what other apps in the same process compiled (shared schema constants).
      expect(JSON.parse(await renderOpenApi(loadConfig({ env: {} })))).toEqual(served);
    } finally {
      await other.close();
    }
  });

  test("is valid OpenAPI 3.1 (swagger-parser)", async () => {
    expect(served.openapi).toStartWith("3.1");
    await SwaggerParser.validate(structuredClone(served) as never);
  });

  test("declares the bearer security scheme", () => {
    expect(served.components.securitySchemes.bearerAuth).toMatchObject({ type: "http", scheme: "bearer" });
  });

  test("every /v1 operation has summary, description, tags, bearer security, a 200 and error responses", () => {
    const operations = v1Operations();
    expect(operations.map((o) => o.name)).toEqual(expect.arrayContaining(["GET /v1/models", "GET /v1/models/{model}"]));
    const operationIds = new Set<string>();
    for (const { name, op } of operations) {
      const where = `${name}: `;
      expect(where + (op.summary ?? "")).not.toBe(where);
      expect(where + (op.description ?? "")).not.toBe(where);
      expect({ where, tags: op.tags?.length ?? 0 }).not.toEqual({ where, tags: 0 });
      expect({ where, security: op.security }).toEqual({ where, security: [{ bearerAuth: [] }] });
      expect({ where, ok: Boolean(op.responses["200"]?.content) }).toEqual({ where, ok: true });
      const errors = Object.keys(op.responses).filter((s) => Number(s) >= 400);
      expect({ where, has401: errors.includes("401") }).toEqual({ where, has401: true });
      for (const status of errors) {
        const schema = op.responses[status]!.content?.["application/json"]?.schema;
        expect({ where, status, schema }).toEqual({ where, status, schema: { $ref: "#/components/schemas/ErrorResponse" } });
        expect({ where, status, generic: (op.responses[status]!.description ?? "").startsWith("Response for status") }).toEqual({ where, status, generic: false });
      }
      if (op.operationId) {
        expect({ where, duplicate: operationIds.has(op.operationId) }).toEqual({ where, duplicate: false });
        operationIds.add(op.operationId);
      }
    }
  });

  test("every /v1 request body field has a description, and the body has examples", () => {
    for (const { name, op } of v1Operations()) {
      for (const [contentType, { schema }] of Object.entries(op.requestBody?.content ?? {})) {
        const body = resolve(schema);
        const properties = (body.properties ?? {}) as Record<string, Json>;
        const undescribed = Object.entries(properties)
          .filter(([, p]) => typeof p.description !== "string" && typeof resolve(p).description !== "string")
          .map(([k]) => k);
        expect({ where: `${name} ${contentType}`, undescribed }).toEqual({ where: `${name} ${contentType}`, undescribed: [] });
        const hasExamples = Array.isArray(body.examples) || Object.values(properties).some((p) => Array.isArray(p.examples) || Array.isArray(resolve(p).examples));
        expect({ where: `${name} ${contentType}`, hasExamples }).toEqual({ where: `${name} ${contentType}`, hasExamples: true });
      }
    }
  });
});


describe("the contract the document states", () => {
  test("info.version is the package version", async () => {
    const pkg = (await Bun.file(join(import.meta.dir, "../../package.json")).json()) as { version: string };
    expect(served.info.version).toBe(pkg.version);
  });

  test("Model.created is an integer, image n is the constant 1, response_format lists what works", () => {
    const model = served.components.schemas.Model as { properties: Record<string, Json> };
    expect(model.properties.created).toMatchObject({ type: "integer" });
    expect(model.properties.created!.anyOf).toBeUndefined();
    for (const name of ["ImageGenerationRequest", "ImageEditJsonRequest", "ImageEditMultipartRequest"]) {
      const props = (served.components.schemas[name] as { properties: Record<string, Json> }).properties;
      expect({ name, n: props.n!.const }).toEqual({ name, n: 1 });
      const formats = JSON.stringify(props.response_format);
      expect({ name, b64: formats.includes('"b64_json"'), url: formats.includes('"url"') }).toEqual({ name, b64: true, url: true });
    }
  });

  test("the multipart edit describes files as files (contentMediaType and format: binary) with an encoding", () => {
    const media = served.paths["/v1/images/edits"]!.post!.requestBody!.content["multipart/form-data"] as { schema: Json; encoding?: Record<string, { contentType: string }> };
    const props = (resolve(media.schema).properties ?? {}) as Record<string, Json & { items?: Json }>;
    for (const file of [props.image!, props["image[]"]!.items!, props.mask!]) {
      expect(file).toMatchObject({ type: "string", format: "binary", contentMediaType: "application/octet-stream" });
    }
    expect(props["image[]"]).toMatchObject({ type: "array" });
    expect(media.encoding?.image?.contentType).toContain("image/png");
    expect(media.encoding?.mask?.contentType).toBe("image/png");
  });

  test("every error response has its own examples, of its own status and in the error shape", () => {
    const byStatus = new Map<string, Set<string>>();
    for (const { name, op } of allOperations()) {
      for (const [status, response] of Object.entries(op.responses)) {
        const json = response.content?.["application/json"];
        if (Number(status) < 400 || !json) continue;
        const examples = Object.entries(json.examples ?? {});
        expect({ where: `${name} ${status}`, count: examples.length > 0 }).toEqual({ where: `${name} ${status}`, count: true });
        for (const [key, { value }] of examples) {
          const error = value.error as { message: string; type: string; param: string | null; code: string | null };
          expect(Object.keys(error).sort()).toEqual(["code", "message", "param", "type"]);
          expect(error.code).toBe(key);
          expect(error.message.length).toBeGreaterThan(10);
          const seen = byStatus.get(status) ?? new Set();
          seen.add(error.message);
          byStatus.set(status, seen);
        }
      }
    }
    // No message stands for two statuses: each status shows its own answers.
    const owners = new Map<string, string>();
    for (const [status, messages] of byStatus) {
      for (const m of messages) {
        expect({ message: m, status: owners.get(m) ?? status }).toEqual({ message: m, status });
        owners.set(m, status);
      }
    }
    expect([...byStatus.keys()].sort()).toEqual(expect.arrayContaining(["400", "401", "402", "403", "404", "409", "413", "415", "429", "500", "502", "503", "504"]));
  });

  test("the error examples are what the server answers: a 402 and a 401 come back word for word", async () => {
    const examplesOf = (path: string, status: string) =>
      Object.values(served.paths[path]!.post!.responses[status]!.content!["application/json"]!.examples ?? {}).map((e) => e.value);
    const noKey = await fetch(`${server.url}/v1/images/generations`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "x" }) });
    expect(examplesOf("/v1/images/generations", "401")).toContainEqual(await noKey.json());
    const broke = await server.userWithKey({ credits: 0 });
    const poor = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${broke.key}` },
      body: JSON.stringify({ prompt: "x", size: "64x64" }),
    });
    expect(poor.status).toBe(402);
    expect(examplesOf("/v1/images/generations", "402")).toContainEqual(await poor.json());
    const empty = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${broke.key}` },
      body: JSON.stringify({ prompt: "" }),
    });
    expect(examplesOf("/v1/images/generations", "400")).toContainEqual(await empty.json());
  });
});

describe("Swagger UI at /docs", () => {
  test("the page and every asset it loads come from this server, none from a CDN", async () => {
    const res = await fetch(`${server.url}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toStartWith("text/html");
    const html = await res.text();
    expect(html).not.toMatch(/https?:\/\//);
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets).toEqual(expect.arrayContaining(["/docs/assets/swagger-ui.css", "/docs/assets/swagger-ui-bundle.js"]));
    for (const asset of assets) {
      expect(asset).toStartWith("/docs/assets/");
      const a = await fetch(`${server.url}${asset}`);
      expect({ asset, status: a.status }).toEqual({ asset, status: 200 });
      const type = a.headers.get("content-type") ?? "";
      expect(type).toMatch(asset.endsWith(".css") ? /^text\/css/ : /^text\/javascript/);
      const text = await a.text();
      if (asset.endsWith("swagger-ui-bundle.js")) {
        expect(text.length).toBeGreaterThan(500_000);
        expect(text).toContain("SwaggerUIBundle");
      }
      if (asset.endsWith("init.js")) expect(text).toContain('url: "/openapi.json"');
    }
  });
});
