/**
 * The workbench's languages below the browser: the catalogs (every key in Chinese, nothing empty,
 * the same parameters and markup), choosing the language (cookie over Accept-Language, q-values),
 * escaping of what is interpolated, plurals, the switch route, and /v1 staying English.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { createApp } from "../../src/app";
import { createServices } from "../../src/services";
import { loadConfig } from "../../src/config";
import { createLogger } from "../../src/logger";
import { createStore, type Store } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { AREA_KEYS, EN, ZH, type MessageKey } from "../../src/workbench/i18n/catalog";
import { negotiateLocale, parseAcceptLanguage, translator } from "../../src/workbench/i18n";
import { html } from "../../src/workbench/html";

const BASE = "http://wb.test";
const keys = Object.keys(EN) as MessageKey[];
const params = (text: string) => [...text.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
const tags = (text: string) => [...text.matchAll(/<\/?([a-z]+)[^>]*>/g)].map((m) => m[0]).sort();

describe("catalogs", () => {
  test("Chinese has every English key, no empty value, the same {params} and the same markup", () => {
    expect(keys.length).toBeGreaterThan(50);
    expect(Object.keys(ZH).sort()).toEqual([...keys].sort());
    for (const k of keys) {
      expect([k, EN[k].trim().length > 0]).toEqual([k, true]);
      expect([k, ZH[k].trim().length > 0]).toEqual([k, true]);
      expect([k, params(ZH[k])]).toEqual([k, params(EN[k])]);
      expect([k, tags(ZH[k])]).toEqual([k, tags(EN[k])]);
    }
  }, 30_000);

  test("no two areas define the same key; plurals come in .one/.other pairs", () => {
    const seen = new Set<string>();
    for (const area of AREA_KEYS) {
      for (const k of area) {
        expect([k, seen.has(k)]).toEqual([k, false]);
        seen.add(k);
      }
    }
    for (const k of keys) {
      if (k.endsWith(".one")) expect(keys).toContain(k.replace(/\.one$/, ".other") as MessageKey);
    }
  }, 30_000);
});

describe("choosing the language", () => {
  test("Accept-Language by q-value; zh, zh-CN, zh-Hans are Chinese; Traditional and others fall through to English", () => {
    expect(parseAcceptLanguage("en;q=0.5, zh-CN, fr;q=0.8")).toEqual(["zh-CN", "fr", "en"]);
    expect(parseAcceptLanguage("de;q=0, en")).toEqual(["en"]);
    expect(parseAcceptLanguage("<script>, en")).toEqual(["en"]);
    expect(negotiateLocale(null, "zh-CN,zh;q=0.9,en;q=0.8")).toBe("zh-CN");
    expect(negotiateLocale(null, "zh")).toBe("zh-CN");
    expect(negotiateLocale(null, "zh-Hans-CN")).toBe("zh-CN");
    expect(negotiateLocale(null, "en-US,en;q=0.9,zh-CN;q=0.8")).toBe("en");
    expect(negotiateLocale(null, "fr;q=1, zh-CN;q=0.7")).toBe("zh-CN");
    expect(negotiateLocale(null, "en;q=0.2, zh;q=0.9")).toBe("zh-CN");
    expect(negotiateLocale(null, "zh-TW")).toBe("en");
    expect(negotiateLocale(null, "zh-Hant, zh-CN;q=0.5")).toBe("zh-CN");
    expect(negotiateLocale(null, "fr, *;q=0.5, zh;q=0.1")).toBe("en");
    expect(negotiateLocale(null, "")).toBe("en");
    expect(negotiateLocale(null, null)).toBe("en");
    expect(negotiateLocale(null, "zh;q=0")).toBe("en");
    // The switch's cookie wins over the browser; an unknown value is ignored.
    expect(negotiateLocale("en", "zh-CN")).toBe("en");
    expect(negotiateLocale("zh-CN", "en-US")).toBe("zh-CN");
    expect(negotiateLocale("klingon", "zh")).toBe("zh-CN");
  }, 30_000);
});

describe("t", () => {
  test("parameters are escaped where the text is interpolated, also in t.html; plurals by the locale's rules", () => {
    const en = translator("en");
    const zh = translator("zh-CN");
    const evil = `<img src=x onerror=alert(1)>`;
    expect(html`<h2>${en("keys.created.heading", { name: evil })}</h2>`.value).toBe("<h2>Your new key “&lt;img src=x onerror=alert(1)&gt;”</h2>");
    expect(html`<h2>${zh("keys.created.heading", { name: evil })}</h2>`.value).toBe("<h2>你的新密钥“&lt;img src=x onerror=alert(1)&gt;”</h2>");
    // Catalog markup stays markup; a parameter in it is still escaped.
    expect(en.html("keys.created.warning").value).toContain("<strong>");
    expect(en.plural("auth.signIn.throttled", 1)).toBe("Too many sign-in attempts. Try again in 1 minute.");
    expect(en.plural("auth.signIn.throttled", 5)).toBe("Too many sign-in attempts. Try again in 5 minutes.");
    expect(zh.plural("auth.signIn.throttled", 1)).toBe("登录尝试次数过多，请在 1 分钟后重试。");
    expect(zh.plural("common.credits", 1)).toBe("积分");
    expect(en.plural("common.credits", 0)).toBe("credits");
    expect(en.locale).toBe("en");
    expect(zh.locale).toBe("zh-CN");
  }, 30_000);

  test("client scripts get their own messages and common.js's, keyed without client.", () => {
    const m = translator("zh-CN").clientMessages(["gallery.js"]);
    expect(m["common.copied"]).toBe("已复制 ✓");
    expect(m["gallery.copyLinkPrompt"]).toBe("请复制此链接：");
    expect(Object.keys(m).every((k) => !k.startsWith("client.") && (k.startsWith("common.") || k.startsWith("gallery.")))).toBe(true);
  }, 30_000);
});

describe("in the app", () => {
  let store: Store | undefined;
  afterEach(() => store?.close());
  function makeApp() {
    const config = loadConfig({ env: {} });
    store = createStore(openDatabase(":memory:"), latestVersion());
    const services = createServices({ config, store, logger: createLogger(() => {}), clock: () => 1_800_000_000_000 });
    const app = createApp(services);
    return (path: string, init: RequestInit = {}) => app.handle(new Request(`${BASE}${path}`, init));
  }

  test("Accept-Language picks the page's language and <html lang>; the switch's cookie overrides it and it goes back where it was", async () => {
    const handle = makeApp();
    const zh = await (await handle("/signin", { headers: { "accept-language": "zh-CN,zh;q=0.9,en;q=0.8" } })).text();
    expect(zh).toContain('<html lang="zh-CN">');
    expect(zh).toContain("<h1>登录</h1>");
    expect(zh).toContain('value="en"');
    const en = await (await handle("/signin")).text();
    expect(en).toContain('<html lang="en">');
    expect(en).toContain("<h1>Sign in</h1>");

    const switched = await handle("/language", {
      method: "POST",
      headers: { origin: BASE, referer: `${BASE}/signup?x=1`, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ lang: "en" }),
    });
    expect(switched.status).toBe(303);
    expect(switched.headers.get("location")).toBe("/signup?x=1");
    const cookie = switched.headers.get("set-cookie")!;
    expect(cookie).toStartWith("atelier_lang=en;");
    expect(cookie).toContain("SameSite=Lax");
    const chosen = await (await handle("/signin", { headers: { "accept-language": "zh-CN", cookie: cookie.split(";")[0]! } })).text();
    expect(chosen).toContain('<html lang="en">');

    // Elsewhere's Referer is not followed; an unknown language and another origin are refused.
    const offsite = await handle("/language", {
      method: "POST",
      headers: { origin: BASE, referer: "http://evil.test/x", "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ lang: "zh-CN" }),
    });
    expect(offsite.headers.get("location")).toBe("/");
    const unknown = await handle("/language", { method: "POST", headers: { origin: BASE, "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams({ lang: "xx" }) });
    expect(unknown.status).toBe(400);
    expect(unknown.headers.get("set-cookie")).toBeNull();
    const cross = await handle("/language", { method: "POST", headers: { origin: "http://evil.test", "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams({ lang: "zh-CN" }) });
    expect(cross.status).toBe(403);
    expect(cross.headers.get("set-cookie")).toBeNull();
  }, 30_000);

  test("form errors come back in the page's language", async () => {
    const handle = makeApp();
    const res = await handle("/signin", {
      method: "POST",
      headers: { origin: BASE, "accept-language": "zh-CN", "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ email: "nobody@example.com", password: "wrong password" }),
    });
    expect(res.status).toBe(401);
    expect(await res.text()).toContain("邮箱或密码不正确。");
  }, 30_000);

  test("the /v1 API answers in English whatever the language (OpenAI clients parse its errors)", async () => {
    const handle = makeApp();
    const res = await handle("/v1/models", { headers: { "accept-language": "zh-CN", cookie: "atelier_lang=zh-CN", authorization: "Bearer sk-wrong" } });
    expect(res.status).toBe(401);
    const body = (await res.json()) as { error: { message: string } };
    expect(body.error.message).toMatch(/^[\x20-\x7e]+$/);
    expect(body.error.message.length).toBeGreaterThan(10);
  }, 30_000);
});
