/**
 * A client generated from the served document compiles: openapi-typescript makes the types
 * (files as Blob, the documented transform for `format: binary`), and a small openapi-fetch
 * client calls generations, a multipart edit with a Blob, models and chat. It must not compile
 * if the edit's `image` were typed as a string, and it runs against the real server.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import openapiTS, { astToString } from "openapi-typescript";
import ts from "typescript";
import { startTestServer, type TestServer } from "../support/server";

const ROOT = join(import.meta.dir, "../..");
let server: TestServer;
let dir: string;

beforeAll(async () => {
  server = await startTestServer();
  // Inside the project (test-artifacts/ is git-ignored), so the client resolves openapi-fetch from its node_modules.
  mkdirSync(join(ROOT, "test-artifacts"), { recursive: true });
  dir = mkdtempSync(join(ROOT, "test-artifacts", "openapi-client-"));
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

const CLIENT = `
import createClient from "openapi-fetch";
import type { paths } from "./api";

export async function run(baseUrl: string, key: string, png: Blob) {
  const api = createClient<paths>({ baseUrl, headers: { authorization: \`Bearer \${key}\` } });
  const generated = await api.POST("/v1/images/generations", { body: { prompt: "a lighthouse", size: "64x64" } });
  // The 200 is JSON or (with stream: true) events: the JSON answer is the one with \`data\`.
  const body = generated.data;
  const id: string | undefined = body && "data" in body ? body.id : undefined;
  const edited = await api.POST("/v1/images/edits", {
    body: { prompt: "add a balloon", image: png, size: "64x64", n: 1 },
    bodySerializer(body) {
      const form = new FormData();
      for (const [k, v] of Object.entries(body)) form.append(k, v instanceof Blob ? v : String(v));
      return form;
    },
  });
  // @ts-expect-error the edit's image is a file, not a string (this line fails to compile if it were typed string)
  const wrong: Parameters<typeof api.POST<"/v1/images/edits">>[1]["body"] = { prompt: "x", image: "not a file" };
  void wrong;
  const models = await api.GET("/v1/models");
  const created: number | undefined = models.data?.data[0]?.created;
  const chat = await api.POST("/v1/chat/completions", { body: { model: "builtin-chat", messages: [{ role: "user", content: "hi" }] } });
  return { id, editedId: edited.data && "data" in edited.data ? edited.data.id : undefined, editStatus: edited.response.status, created, chatStatus: chat.response.status, genStatus: generated.response.status };
}
`;

function compile(files: string[]): string[] {
  const program = ts.createProgram(files, {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ["lib.es2022.d.ts", "lib.dom.d.ts"],
    skipLibCheck: true,
    types: [],
  });
  return ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
}

describe("a client generated with openapi-typescript + openapi-fetch", () => {
  test("compiles with the multipart edit's image typed as a file, and works against the server", async () => {
    const doc = await (await fetch(`${server.url}/openapi.json`)).json();
    const ast = await openapiTS(doc, {
      transform(schema) {
        if ("format" in schema && schema.format === "binary") return ts.factory.createTypeReferenceNode("Blob");
      },
    });
    const types = astToString(ast);
    writeFileSync(join(dir, "api.ts"), types);
    writeFileSync(join(dir, "client.ts"), CLIENT);
    expect(compile([join(dir, "client.ts")])).toEqual([]);

    // The same client against the document as it would be with `image` a plain string: it must not compile.
    writeFileSync(join(dir, "api.ts"), types.replace(/image\?: Blob;/, "image?: string;"));
    expect(types).toContain("image?: Blob;");
    expect(compile([join(dir, "client.ts")]).join("\n")).toMatch(/Type 'Blob' is not assignable to type 'string'|Unused '@ts-expect-error' directive/);

    // And it runs: the generated client's calls succeed on the real server.
    writeFileSync(join(dir, "api.ts"), types);
    const { makePng } = await import("../support/images");
    const u = await server.userWithKey({ credits: 2 });
    const { run } = (await import(join(dir, "client.ts"))) as { run: (b: string, k: string, p: Blob) => Promise<Record<string, unknown>> };
    const out = await run(server.url, u.key, new Blob([makePng(64, 64)], { type: "image/png" }));
    expect(out).toMatchObject({ genStatus: 200, editStatus: 200, chatStatus: 200 });
    expect(out.id).toMatch(/^req_/);
    expect(out.editedId).toMatch(/^req_/);
    expect(typeof out.created).toBe("number");
  }, 180_000);
});
