/**
 * Task webhooks against real servers and a real receiver on loopback (so these servers set
 * `[webhooks] allow_private_addresses = true`, except the one that shows it is needed):
 *
 * - an event goes out signed (checked with test/support/standardWebhooks.ts, written from the
 *   Standard Webhooks text, and with the official openai client's webhooks.unwrap), the receiver answers 500 twice, the server is stopped between
 *   attempts and started again on the same data directory, and the third attempt delivers;
 * - without allow_private_addresses a loopback URL is refused when set, when checked for a
 *   request, and at delivery;
 * - the workbench page in chromium: refusal message, secret shown once, test event with a
 *   retry, the attempts listed, rotation (the old secret still valid until the time shown, and
 *   signing beside the new one), rotation without overlap, removal; screenshots at 1280×800 and 375×812 under
 *   test-artifacts/webhooks/ (look at them).
 *
 * The events come from `services.taskEvents.taskFinished`, the port the image tasks call.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Server } from "bun";
import OpenAI from "openai";
import { type Browser, type Page } from "playwright-core";
import { launchChromium } from "../support/browser";
import type { ImageTaskObject, TaskEvent } from "../../src/core/tasks";
import { taskEventId } from "../../src/core/webhooks";
import { verifyStandardWebhook } from "../support/standardWebhooks";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";
import { until } from "../support/until";

const TEST_TIMEOUT_MS = 90_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/webhooks");

interface Hit {
  at: number;
  path: string;
  host: string | null;
  headers: Record<string, string>;
  body: string;
}

/** A webhook receiver on loopback: records every POST, answers from a script (then 200). */
function startReceiver() {
  const hits: Hit[] = [];
  const script: number[] = [];
  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const url = new URL(request.url);
      hits.push({ at: Date.now(), path: url.pathname + url.search, host: request.headers.get("host"), headers: Object.fromEntries(request.headers), body: await request.text() });
      const status = script.shift() ?? 200;
      return new Response(status === 200 ? "thanks" : `receiver says ${status}`, { status });
    },
  });
  return { hits, script, url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) };
}

function succeededTask(id: string): ImageTaskObject {
  return {
    id,
    object: "image.task",
    status: "succeeded",
    created_at: Math.floor(Date.now() / 1000) - 3,
    started_at: Math.floor(Date.now() / 1000) - 2,
    finished_at: Math.floor(Date.now() / 1000),
    model: "builtin-image",
    endpoint: "generations",
    result: { created: Math.floor(Date.now() / 1000), data: [{ b64_json: "iVBORw0KGgo=", revised_prompt: "a lighthouse at dusk" }], size: "256x256", quality: "auto", output_format: "png", generation_time_ms: 12 } as unknown as ImageTaskObject["result"],
  };
}

const LOOPBACK_ALLOWED = (delays: number[]) => `
[server]
log_requests = false

[webhooks]
allow_private_addresses = true
retry_delays_ms = [${delays.join(", ")}]
poll_interval_ms = 50
attempt_timeout_ms = 2000
`;

describe("delivery: signed, retried, and carried across a restart", () => {
  let receiver: ReturnType<typeof startReceiver>;
  let dataDir: string;
  let server: TestServer | undefined;

  beforeAll(() => {
    receiver = startReceiver();
    dataDir = tempDir("atelier-webhooks-");
  });
  afterAll(async () => {
    await server?.services.taskEvents.stop();
    await server?.close();
    receiver.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** A server on `dataDir` with its delivery worker running. */
  async function start(): Promise<TestServer> {
    // Second retry 3 s after the second failure: the server is down in between.
    const s = await startTestServer({ toml: LOOPBACK_ALLOWED([300, 3_000, 300]), config: (c) => (c.server.data_dir = dataDir) });
    s.services.taskEvents.start();
    return s;
  }

  async function stop(s: TestServer): Promise<void> {
    await s.services.taskEvents.stop();
    await s.stop();
    rmSync(s.dataDir, { recursive: true, force: true }); // the unused temp dir startTestServer made
  }

  test("500, 500, stop, start, 200: one event id, every attempt verifies, the attempts are recorded", async () => {
    server = await start();
    const { userId } = await server.userWithKey();
    const set = await server.services.taskEvents.endpoints.setUrl(userId, `${receiver.url}/hooks/atelier?token=abc`);
    expect(set.refused).toBeUndefined();
    const secret = set.secret!;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);

    receiver.script.push(500, 500);
    const event: TaskEvent = { type: "image.task.succeeded", userId, task: succeededTask("req_e2e_restart") };
    await server.services.taskEvents.taskFinished(event);

    // Attempt 1 at once, attempt 2 about 0.3 s later.
    await until(() => receiver.hits.length >= 2, "two attempts", 15_000);
    const records = server.services.taskEvents.endpoints;
    await until(async () => (await records.deliveries(userId, 5))[0]?.delivery.attempts === 2, "the second attempt recorded", 15_000);
    const pending = (await records.deliveries(userId, 5))[0]!.delivery;
    expect(pending.state).toBe("pending");
    const nextAt = pending.next_attempt_at!;
    expect(nextAt - Date.now()).toBeGreaterThan(1_500);

    await stop(server);
    server = undefined;
    // Past the time the third attempt was due: nobody sends while the server is down.
    await Bun.sleep(Math.max(0, nextAt - Date.now()) + 300);
    expect(receiver.hits.length).toBe(2);

    server = await start();
    await until(() => receiver.hits.length >= 3, "the delivery after the restart", 15_000);
    const again = server.services.taskEvents.endpoints;
    await until(async () => (await again.deliveries(userId, 5))[0]?.delivery.state === "delivered", "the delivery recorded", 15_000);

    const hits = receiver.hits;
    expect(hits.length).toBe(3);
    const id = taskEventId("image.task.succeeded", "req_e2e_restart");
    for (const hit of hits) {
      expect(hit.path).toBe("/hooks/atelier?token=abc");
      expect(hit.headers["webhook-id"]).toBe(id);
      expect(hit.headers["content-type"]).toBe("application/json");
      expect(verifyStandardWebhook(secret, hit.headers, hit.body, Math.floor(hit.at / 1000))).toBe(true);
      // The signature covers the body: a changed byte fails.
      expect(verifyStandardWebhook(secret, hit.headers, hit.body.replace("succeeded", "failed"), Math.floor(hit.at / 1000))).toBe(false);
    }
    // The official openai client verifies them too (OpenAI's webhooks use the same scheme).
    const openai = new OpenAI({ apiKey: "unused", baseURL: `${server.url}/v1` });
    for (const hit of hits) expect(((await openai.webhooks.unwrap(hit.body, hit.headers, secret)) as { type: string }).type).toBe("image.task.succeeded");
    await expect(openai.webhooks.unwrap(hits[0]!.body, hits[0]!.headers, `whsec_${Buffer.alloc(32, 1).toString("base64")}`)).rejects.toThrow();
    // The same body every time (it is stored as sent); its timestamps are per attempt.
    expect(new Set(hits.map((h) => h.body)).size).toBe(1);
    const body = JSON.parse(hits[0]!.body);
    expect(body.type).toBe("image.task.succeeded");
    expect(body.data.id).toBe("req_e2e_restart");
    expect(body.data.status).toBe("succeeded");
    expect(body.data.result.data[0]).toEqual({ revised_prompt: "a lighthouse at dusk" });
    expect(hits[2]!.at - hits[1]!.at).toBeGreaterThanOrEqual(3_000);

    const [view] = await again.deliveries(userId, 5);
    expect(view!.attempts.map((a) => [a.status, a.error])).toEqual([
      [500, "HTTP 500: receiver says 500"],
      [500, "HTTP 500: receiver says 500"],
      [200, null],
    ]);
    expect(view!.delivery.attempts).toBe(3);

    // The secret is sealed at rest under a key kept beside the database, readable by the owner only.
    const keyFile = join(dataDir, "webhook-secrets.key");
    expect(existsSync(keyFile)).toBe(true);
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    for (const file of readdirSync(dataDir).filter((f) => f.startsWith("atelier.db"))) {
      const bytes = readFileSync(join(dataDir, file)).toString("latin1");
      expect(bytes.includes(secret)).toBe(false);
      expect(bytes.includes(secret.slice(6))).toBe(false);
    }
  }, TEST_TIMEOUT_MS);
});

describe("without allow_private_addresses, loopback is refused", () => {
  let receiver: ReturnType<typeof startReceiver>;
  let server: TestServer;

  beforeAll(async () => {
    receiver = startReceiver();
    server = await startTestServer({ toml: "[server]\nlog_requests = false\n[webhooks]\npoll_interval_ms = 50\n" });
    server.services.taskEvents.start();
  });
  afterAll(async () => {
    await server.services.taskEvents.stop();
    await server.close();
    receiver.stop();
  });

  test("as an endpoint, as a request's webhook_url, and at delivery", async () => {
    expect(server.services.config.webhooks.allow_private_addresses).toBe(false);
    const hooks = server.services.taskEvents;
    const { userId } = await server.userWithKey();
    const refused = await hooks.endpoints.setUrl(userId, `${receiver.url}/hook`);
    expect(refused.refused).toBe("Webhooks may only go to public addresses: 127.0.0.1 is a loopback address.");
    // A name is resolved (here by the system resolver) and judged by its addresses.
    expect((await hooks.endpoints.setUrl(userId, `http://localhost:${new URL(receiver.url).port}/hook`)).refused).toMatch(/localhost resolves to .*, which is a loopback address/);
    expect((await hooks.endpoints.setUrl(userId, "http://[::ffff:169.254.169.254]/latest")).refused).toContain("IPv4-mapped link-local");
    expect((await hooks.endpoints.view(userId)).url).toBeNull();

    await hooks.endpoints.rotateSecret(userId);
    expect(await hooks.checkWebhookUrl(`${receiver.url}/mine`, userId)).toBe("Webhooks may only go to public addresses: 127.0.0.1 is a loopback address.");

    // Recorded anyway (the route would have refused it): every attempt checks again and sends nothing.
    await hooks.taskFinished({ type: "image.task.failed", userId, task: { ...succeededTask("req_e2e_strict"), status: "failed", result: undefined }, webhookUrl: `${receiver.url}/mine` });
    await until(async () => ((await hooks.endpoints.deliveries(userId, 5))[0]?.attempts.length ?? 0) >= 1, "the refused attempt recorded", 15_000);
    const [view] = await hooks.endpoints.deliveries(userId, 5);
    expect(view!.attempts[0]!.status).toBeNull();
    expect(view!.attempts[0]!.error).toBe("not sent: Webhooks may only go to public addresses: 127.0.0.1 is a loopback address.");
    expect(view!.delivery.state).toBe("pending");
    expect(receiver.hits.length).toBe(0);
  }, TEST_TIMEOUT_MS);
});

describe("the Webhooks page in a real browser", () => {
  let receiver: ReturnType<typeof startReceiver>;
  let server: TestServer;
  let browser: Browser;
  let page: Page;
  const email = `hooks-${Date.now()}@example.com`;
  const XSS = `"><script>window.__pwned = 1</script>`;
  /** What each confirm asked, in order. */
  const dialogs: string[] = [];

  async function shots(name: string): Promise<void> {
    for (const [w, h] of [[1280, 800], [375, 812]] as const) {
      await page.setViewportSize({ width: w, height: h });
      await page.screenshot({ path: join(ARTIFACTS, `${name}-${w}x${h}.png`), fullPage: true });
    }
    await page.setViewportSize({ width: 1280, height: 800 });
  }

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    receiver = startReceiver();
    server = await startTestServer({ toml: LOOPBACK_ALLOWED([300]) });
    server.services.taskEvents.start();
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
    page.on("dialog", async (d) => {
      dialogs.push(d.message());
      if (d.type() === "confirm") return d.accept();
      throw new Error(`unexpected ${d.type()} dialog: ${d.message()}`);
    });
  }, TEST_TIMEOUT_MS);

  afterAll(async () => {
    await browser?.close();
    await server?.services.taskEvents.stop();
    await server?.close();
    receiver?.stop();
  }, TEST_TIMEOUT_MS);

  test("set the endpoint, see the secret once, send a test event, watch it retried and delivered", async () => {
    // Signed out: the page sends you to sign in; its forms refuse.
    const anonymous = await fetch(`${server.url}/webhooks/secret`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "" });
    expect(anonymous.status).toBe(403);

    await page.goto(`${server.url}/signup`);
    await page.getByLabel("Email").fill(email);
    await page.getByLabel(/^Password/).fill("correct horse battery");
    await page.getByRole("button", { name: "Create account" }).click();
    await page.waitForURL(`${server.url}/playground`);
    await page.getByRole("link", { name: "Webhooks" }).click();
    await page.waitForURL(`${server.url}/webhooks`);
    expect(await page.getByRole("button", { name: "Send test event" }).isDisabled()).toBe(true);
    await shots("01-empty");

    // A URL that cannot be used: a clear message, the typed text kept (as text).
    await page.getByLabel("Endpoint URL").fill(`http://nowhere.invalid/${XSS}`);
    await page.getByRole("button", { name: "Save" }).click();
    await page.getByRole("alert").first().waitFor();
    expect(await page.getByRole("alert").first().textContent()).toContain("The host nowhere.invalid could not be resolved");
    expect(await page.getByLabel("Endpoint URL").inputValue()).toBe(`http://nowhere.invalid/${XSS}`);
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    await page.getByLabel("Endpoint URL").fill("ftp://files.example.com/in");
    await page.getByRole("button", { name: "Save" }).click();
    await page.getByText("A webhook URL must start with http:// or https://.").waitFor();
    await shots("02-refused");

    // The first endpoint makes the secret, shown once.
    await page.getByLabel("Endpoint URL").fill(`${receiver.url}/in`);
    await page.getByRole("button", { name: "Save" }).click();
    const secret = (await page.getByTestId("new-secret").inputValue()).trim();
    expect(secret).toMatch(/^whsec_/);
    // common.js replaces the POST address once its script has run: wait for it, do not race it.
    await page.waitForURL((u) => u.pathname === "/webhooks");
    await shots("03-secret-once");
    await page.reload();
    expect(await page.getByTestId("new-secret").count()).toBe(0);
    expect(await page.content()).not.toContain(secret);
    expect(await page.getByLabel("Endpoint URL").inputValue()).toBe(`${receiver.url}/in`);

    // A test event: the receiver fails once, the retry is delivered; both verify.
    receiver.script.push(503);
    await page.getByRole("button", { name: "Send test event" }).click();
    await page.getByText("A test event is on its way").waitFor();
    await until(() => receiver.hits.length >= 2, "the retry", 15_000);
    for (const hit of receiver.hits) {
      expect(verifyStandardWebhook(secret, hit.headers, hit.body, Math.floor(hit.at / 1000))).toBe(true);
      expect(JSON.parse(hit.body).type).toBe("webhook.test");
    }
    const userId = (await server.services.store.users.byEmail(email))!.id;
    await until(async () => (await server.services.taskEvents.endpoints.deliveries(userId, 5))[0]?.delivery.state === "delivered", "the delivery recorded", 15_000);
    await page.reload();
    const row = page.locator("table.deliveries tr").first();
    expect(await row.locator("summary").textContent()).toContain("webhook.test · 2 attempts · delivered");
    expect(await row.locator(".status").first().textContent()).toBe("delivered");
    // The latest delivery is open; its attempts are listed in order.
    expect(await row.locator("details").getAttribute("open")).not.toBeNull();
    const attempts = await row.locator("ol.attempts li").allTextContents();
    expect(attempts.length).toBe(2);
    expect(attempts[0]).toContain("503");
    expect(attempts[0]).toContain("HTTP 503: receiver says 503");
    expect(attempts[1]).toContain("200");
    await shots("04-deliveries");

    // Rotation (confirmed, the overlap named) shows a new secret once and until when the old one
    // stays valid; the next event is signed with both, so a receiver still on the old one accepts it.
    await page.getByRole("button", { name: "Rotate secret" }).click();
    const rotated = (await page.getByTestId("new-secret").inputValue()).trim();
    expect(rotated).not.toBe(secret);
    expect(dialogs.at(-1)).toBe("Make a new secret? The current one stays valid beside it for 24 hours: update your receiver before then.");
    const until24h = (await server.services.taskEvents.endpoints.view(userId)).previousSecretExpiresAt!;
    expect(Math.abs(until24h - Date.now() - 86_400_000)).toBeLessThan(60_000);
    const validUntil = `Your previous secret stays valid until ${new Date(until24h).toISOString().replace("T", " ").slice(0, 19)} UTC`;
    expect(await page.getByTestId("previous-secret-valid").textContent()).toContain(validUntil);
    await page.waitForURL((u) => u.pathname === "/webhooks");
    await shots("05-rotated");
    await page.getByRole("button", { name: "Send test event" }).click();
    await page.getByText("A test event is on its way").waitFor();
    await until(() => receiver.hits.length >= 3, "the event after rotation", 15_000);
    const duringOverlap = receiver.hits[2]!;
    expect(duringOverlap.headers["webhook-signature"]!.split(" ").length).toBe(2);
    expect(verifyStandardWebhook(rotated, duringOverlap.headers, duringOverlap.body, Math.floor(duringOverlap.at / 1000))).toBe(true);
    expect(verifyStandardWebhook(secret, duringOverlap.headers, duringOverlap.body, Math.floor(duringOverlap.at / 1000))).toBe(true);
    // The page keeps saying so (the new secret itself is not shown again).
    await page.reload();
    expect(await page.getByTestId("previous-secret-valid").textContent()).toContain(validUntil);
    expect(await page.content()).not.toContain(rotated);
    await shots("06-overlap");

    // Rotating without overlap (a leaked secret): both older secrets stop at once.
    await page.getByRole("button", { name: "Rotate now, without overlap" }).click();
    const rotatedNow = (await page.getByTestId("new-secret").inputValue()).trim();
    expect(dialogs.at(-1)).toContain("stop the current one at once");
    expect(await page.getByTestId("previous-secret-valid").count()).toBe(0);
    await page.waitForURL((u) => u.pathname === "/webhooks");
    await page.getByRole("button", { name: "Send test event" }).click();
    await page.getByText("A test event is on its way").waitFor();
    await until(() => receiver.hits.length >= 4, "the event after rotating without overlap", 15_000);
    const last = receiver.hits[3]!;
    expect(last.headers["webhook-signature"]!.split(" ").length).toBe(1);
    expect(verifyStandardWebhook(rotatedNow, last.headers, last.body, Math.floor(last.at / 1000))).toBe(true);
    expect(verifyStandardWebhook(rotated, last.headers, last.body, Math.floor(last.at / 1000))).toBe(false);
    expect(verifyStandardWebhook(secret, last.headers, last.body, Math.floor(last.at / 1000))).toBe(false);

    // Removal (confirmed).
    await page.getByRole("button", { name: "Remove endpoint" }).click();
    await page.getByText("The endpoint was removed.").waitFor();
    expect(await page.getByLabel("Endpoint URL").inputValue()).toBe("");
    expect(await page.getByRole("button", { name: "Send test event" }).isDisabled()).toBe(true);
    await shots("07-removed");
  }, TEST_TIMEOUT_MS);
});
