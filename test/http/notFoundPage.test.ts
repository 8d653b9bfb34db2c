/**
 * The 404 of an unknown path: an HTML page for a browser's navigation (Accept: text/html),
 * the API's JSON error for everyone else and for every /v1 path, whatever they accept.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startTestServer, type TestServer } from "../support/server";

const BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

let server: TestServer;
let disabled: TestServer;

beforeAll(async () => {
  server = await startTestServer({ toml: "[server]\nlog_requests = false\n" });
  disabled = await startTestServer({ toml: "[server]\nlog_requests = false\n[workbench]\nenabled = false\n" });
});

afterAll(async () => {
  await server?.close();
  await disabled?.close();
});

async function expectJson404(res: Response): Promise<void> {
  expect(res.status).toBe(404);
  expect(res.headers.get("content-type")).toStartWith("application/json");
  const body = (await res.json()) as { error: { code: string; type: string; message: string; param: null } };
  expect(body.error.code).toBe("unknown_route");
  expect(body.error.type).toBe("not_found_error");
  expect(body.error.param).toBeNull();
}

describe("404 for an unknown path", () => {
  test("a browser's navigation gets the workbench's HTML page, the path shown as text", async () => {
    const res = await fetch(`${server.url}/nope/%3Cscript%3E`, { headers: { accept: BROWSER_ACCEPT } });
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(res.headers.get("content-security-policy")).toContain("script-src 'self'");
    const page = await res.text();
    expect(page).toContain("<h1>Page not found</h1>");
    expect(page).toContain("There is no page at /nope/%3Cscript%3E.");
    expect(page).not.toContain("<script>");
    expect(page).toContain('href="/"');
  });

  test("a very long path is shown cut, so the page stays small", async () => {
    const res = await fetch(`${server.url}/${"a".repeat(5000)}`, { headers: { accept: "text/html" } });
    expect(res.status).toBe(404);
    const page = await res.text();
    expect(page).toContain(`/${"a".repeat(199)}…`);
    expect(page).not.toContain("a".repeat(201));
  });

  test("API clients keep the JSON error: no Accept, */*, application/json, and the openai client", async () => {
    await expectJson404(await fetch(`${server.url}/nope`));
    await expectJson404(await fetch(`${server.url}/nope`, { headers: { accept: "*/*" } }));
    await expectJson404(await fetch(`${server.url}/nope`, { headers: { accept: "application/json" } }));
    // Something that merely mentions html in another media type is not a browser.
    await expectJson404(await fetch(`${server.url}/nope`, { headers: { accept: "application/xhtml+xml" } }));
    const { key } = await server.userWithKey();
    const client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const err = await client.get("/nowhere").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).code).toBe("unknown_route");
  });

  test("every /v1 path keeps the JSON error even for a browser", async () => {
    await expectJson404(await fetch(`${server.url}/v1/nope`, { headers: { accept: BROWSER_ACCEPT } }));
    await expectJson404(await fetch(`${server.url}/v1`, { headers: { accept: BROWSER_ACCEPT } }));
  });

  test("only a page fetch gets HTML: a POST stays JSON; a known path with the wrong method stays 405", async () => {
    await expectJson404(await fetch(`${server.url}/nope`, { method: "POST", headers: { accept: BROWSER_ACCEPT }, body: "x" }));
    const res = await fetch(`${server.url}/v1/models`, { method: "DELETE", headers: { accept: BROWSER_ACCEPT } });
    expect(res.status).toBe(405);
    expect(res.headers.get("content-type")).toStartWith("application/json");
  });

  test("with the workbench disabled there is no page to frame it: JSON", async () => {
    await expectJson404(await fetch(`${disabled.url}/nope`, { headers: { accept: BROWSER_ACCEPT } }));
  });
});
