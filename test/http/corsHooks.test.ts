/**
 * The CORS request hooks (ours and @elysiajs/cors's) run on every request: declared
 * synchronous, they leave Elysia's composed handler synchronous (no await per hook, the route's
 * promise handed back as it is), and still set and answer what CORS needs.
 */
import { describe, expect, test } from "bun:test";
import { Elysia } from "elysia";
import { apiCors, declareCorsHooksSync, EXPOSED_HEADERS } from "../../src/http/cors";

function appWithCors(declared: boolean) {
  const app = new Elysia({ handler: { standardHostname: false } })
    .use(apiCors())
    .post("/v1/chat/completions", () => ({ ok: true }))
    .get("/keys", () => "page");
  if (declared) declareCorsHooksSync(app.event.request);
  return app;
}

describe("CORS request hooks declared synchronous", () => {
  test("the composed handler is a plain function with them, an async one without (Elysia's guess from the hooks' source)", () => {
    expect(appWithCors(true).fetch.constructor.name).toBe("Function");
    expect(appWithCors(false).fetch.constructor.name).toBe("AsyncFunction");
  });

  test("both hooks are declared, and nothing else is", () => {
    const app = appWithCors(true).onRequest(function laterHook() {});
    declareCorsHooksSync(app.event.request);
    const declared = (app.event.request ?? []).map((h) => [h.fn.name, h.isAsync]);
    expect(declared).toEqual([
      ["corsPreflight", false],
      ["processCors", false],
      ["laterHook", undefined],
    ]);
  });

  test("a browser's API request still gets Allow-Origin, Expose-Headers and Vary; a server-side client only Vary", async () => {
    const app = appWithCors(true);
    const browser = await app.fetch(new Request("http://x/v1/chat/completions", { method: "POST", headers: { origin: "https://elsewhere.example" } }));
    expect(browser.status).toBe(200);
    expect(await browser.json()).toEqual({ ok: true });
    expect(browser.headers.get("access-control-allow-origin")).toBe("https://elsewhere.example");
    expect(browser.headers.get("access-control-expose-headers")).toBe(EXPOSED_HEADERS);
    expect(browser.headers.get("vary")).toBe("Origin");

    const server = await app.fetch(new Request("http://x/v1/chat/completions", { method: "POST" }));
    expect(server.headers.get("access-control-allow-origin")).toBeNull();
    expect(server.headers.get("vary")).toBe("Origin");

    const page = await app.fetch(new Request("http://x/keys", { headers: { origin: "https://elsewhere.example" } }));
    expect(await page.text()).toBe("page");
    expect(page.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("a preflight is still answered by the hook: 204 with the requested headers echoed", async () => {
    const res = await appWithCors(true).fetch(
      new Request("http://x/v1/chat/completions", {
        method: "OPTIONS",
        headers: { origin: "https://elsewhere.example", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" },
      }),
    );
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("https://elsewhere.example");
    expect(res.headers.get("access-control-allow-headers")).toBe("authorization, content-type");
    expect(res.headers.get("access-control-allow-methods")).toBe("GET, POST, OPTIONS");
  });
});
