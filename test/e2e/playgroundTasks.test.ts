/**
 * The playground on the async and streaming paths, in a real browser (Debian's chromium driven
 * by playwright-core) against a real listening server whose image engine the test controls:
 * a streamed generation shows its previews as they arrive and then the image; a reload while a
 * streamed or a background request is running reattaches to it and shows the result; a
 * background task shows its place in the queue and its progress, and can be canceled (refunded).
 * Screenshots at 1280×800 and 375×812, light and dark, go to test-artifacts/playground-tasks/.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, type Locator, type Page } from "playwright-core";
import { launchChromium, signInThroughForm } from "../support/browser";
import type { ImageJob } from "../../src/core/engine";
import { ControlledEngine, makePng } from "../support/images";
import { startTestServer, type TestServer } from "../support/server";

// Generous: a shared 2-core machine runs a browser, a server and other suites at once.
const TEST_TIMEOUT_MS = 90_000;
const ARTIFACTS = join(import.meta.dir, "../../test-artifacts/playground-tasks");
const PASSWORD = "correct horse battery";
const SIZE = "256x256";

let server: TestServer;
let engine: ControlledEngine;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let userId = 0;

/** Named gates the engine waits at until the test opens them. */
const gates = new Map<string, { promise: Promise<void>; open: () => void }>();
function gate(name: string) {
  let g = gates.get(name);
  if (!g) {
    let open!: () => void;
    const promise = new Promise<void>((r) => (open = r));
    g = { promise, open };
    gates.set(name, g);
  }
  return g;
}
const openGate = (name: string) => gate(name).open();

/** A picture that changes with the step, so previews and the final image differ. */
function picture(job: ImageJob, step: number) {
  const w = job.size?.width ?? 64;
  const h = job.size?.height ?? 64;
  const block = Math.max(1, 64 >> (step * 2));
  const bytes = makePng(w, h, (x, y) => {
    const bx = Math.floor(x / block);
    const by = Math.floor(y / block);
    return [(bx * 37 + step * 60) % 256, (by * 53) % 256, 150 + step * 30, 255];
  });
  return { bytes, mime: "image/png" as const, width: w, height: h };
}

/**
 * What the engine does, by the prompt's first word: "previews" sends two partial images and
 * waits at the "final" gate; "reload" sends one and waits at "reload"; "blocker" waits at
 * "blocker"; "background" reports 50 % and waits at "background".
 */
async function scripted(job: ImageJob) {
  const word = job.prompt.split(" ")[0]!;
  if (word === "previews") {
    for (const step of [0, 1]) {
      await Bun.sleep(150);
      job.onProgress?.({ fraction: (step + 1) / 3, partial: picture(job, step) });
    }
    await gate("final").promise;
  } else if (word === "reload") {
    job.onProgress?.({ fraction: 0.3, partial: picture(job, 0) });
    await gate("reload").promise;
  } else if (word === "blocker") {
    await gate("blocker").promise;
  } else if (word === "background") {
    job.onProgress?.({ fraction: 0.5 });
    await gate("background").promise;
  }
  return picture(job, 2);
}

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Screenshots at desktop and phone size, light and dark, then back to the desktop in light. */
async function shots(name: string): Promise<void> {
  for (const scheme of ["light", "dark"] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width: 1280, height: 800 });
    await shot(`${name}-1280-${scheme}`);
    await page.setViewportSize({ width: 375, height: 812 });
    await shot(`${name}-375-${scheme}`);
  }
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 800 });
}

/** Waits (bounded) until the element's text contains the expected part. */
async function containsText(locator: Locator, part: string): Promise<void> {
  const first = locator.first();
  await first.waitFor({ timeout: 15_000 });
  for (let i = 0; i < 150; i++) {
    if ((await first.textContent())?.includes(part)) return;
    await Bun.sleep(100);
  }
  expect(await first.textContent()).toContain(part);
}

async function rememberedTask(): Promise<unknown> {
  return page.evaluate((key) => sessionStorage.getItem(key), `atelier.playground.task.${userId}`);
}

async function startGenerate(prompt: string, background = false): Promise<void> {
  await page.locator("#gen-prompt").fill(prompt);
  await page.locator("#gen-size").selectOption(SIZE);
  await page.locator("#gen-background").setChecked(background);
  await page.getByRole("button", { name: "Generate (1 credit)" }).click();
}

async function finalImageShown(): Promise<void> {
  const image = page.locator("#gen-result img[data-image]");
  await image.waitFor({ state: "visible", timeout: 30_000 });
  expect(await image.evaluate((img: HTMLImageElement) => img.naturalWidth)).toBe(256);
  await containsText(page.locator("#gen-result [data-meta]"), "credits left");
  expect(await page.locator("#gen-result [data-preview]").isHidden()).toBe(true);
  expect(await page.locator("#gen-result [data-busy]").isHidden()).toBe(true);
  expect(await rememberedTask()).toBeNull();
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  engine = new ControlledEngine();
  engine.behave = scripted;
  server = await startTestServer({
    config: (c) => {
      c.server.log_requests = false;
      c.limits.async_concurrency = 1;
      c.limits.async_per_user_concurrency = 1;
    },
    customize: (s) => s.engines.registerBuiltinImage(engine),
  });
  const user = await server.userWithKey({ email: "streamer@example.com", credits: 20, password: PASSWORD });
  userId = user.userId;
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on("dialog", (d) => {
    throw new Error(`unexpected ${d.type()} dialog: ${d.message()}`);
  });
  await signInThroughForm(page, server.url, user.email, PASSWORD);
  await page.waitForURL(/\/playground/);
}, TEST_TIMEOUT_MS);

afterAll(async () => {
  for (const g of gates.values()) g.open();
  await browser?.close();
  await server?.close();
}, TEST_TIMEOUT_MS);

describe("the playground on the streaming and async paths", () => {
  test("a streamed generation shows the previews as they arrive, then the image", async () => {
    const before = await server.balance(userId);
    await startGenerate("previews of a lighthouse");
    const caption = page.locator("#gen-result [data-preview-caption]");
    await containsText(caption, "Preview 2 of 2");
    const preview = page.locator("#gen-result img[data-partial]");
    expect(await preview.isVisible()).toBe(true);
    expect(await preview.getAttribute("alt")).toContain("still being made");
    expect(await page.locator("#gen-result [data-figure]").isHidden()).toBe(true);
    // The progress bar is labelled; the live region heard about the preview.
    expect(await page.getByRole("progressbar", { name: "Image progress" }).count()).toBe(1);
    await containsText(page.locator("#gen-result [data-announce]"), "Preview 2 of 2 received.");
    expect(await page.locator("#gen-result [data-announce]").getAttribute("aria-live")).toBe("polite");
    // The stream's id is kept until the outcome is shown.
    expect(JSON.parse(String(await rememberedTask()))).toMatchObject({ panel: "gen", mode: "stream" });
    await shots("01-stream-preview");

    openGate("final");
    await finalImageShown();
    await containsText(page.locator("#gen-result [data-announce]"), "The image is ready.");
    expect(await server.balance(userId)).toBe(before - 1);
    await shots("02-stream-done");
  }, TEST_TIMEOUT_MS);

  test("a reload during a streamed generation reattaches to it and shows the image", async () => {
    await startGenerate("reload while streaming");
    await containsText(page.locator("#gen-result [data-preview-caption]"), "Preview 1 of 2");
    const saved = JSON.parse(String(await rememberedTask())) as { id: string };
    expect(saved.id).toMatch(/\S/);

    await page.reload();
    // No new request: the page follows the one that is running.
    await containsText(page.locator("#gen-result [data-status]"), "Running");
    expect(await page.locator("#gen-result [data-busy]").isVisible()).toBe(true);
    expect(await page.getByRole("button", { name: "Generate (1 credit)" }).isDisabled()).toBe(true);
    expect(await page.locator("#gen-result [data-cancel]").isHidden()).toBe(true);
    // The form shows what is running.
    expect(await page.locator("#gen-prompt").inputValue()).toBe("reload while streaming");
    expect(await page.locator("#gen-size").inputValue()).toBe(SIZE);
    await shots("03-stream-reattached");

    openGate("reload");
    await finalImageShown();
    expect(await page.getByRole("button", { name: "Generate (1 credit)" }).isDisabled()).toBe(false);
  }, TEST_TIMEOUT_MS);

  test("a background task shows its queue position and progress, survives a reload and shows the image", async () => {
    // Another user's task takes the only async slot, so ours waits in the queue.
    const other = await server.userWithKey({ credits: 2 });
    const blocker = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${other.key}`, "content-type": "application/json", prefer: "respond-async" },
      body: JSON.stringify({ prompt: "blocker task", size: "64x64" }),
    });
    expect(blocker.status).toBe(202);
    const before = await server.balance(userId);

    await startGenerate("background lighthouse", true);
    await containsText(page.locator("#gen-result [data-status]"), "Queued, position 1 in the queue");
    await containsText(page.locator("#gen-result [data-announce]"), "Queued, position 1 in the queue.");
    expect(await page.getByRole("button", { name: "Cancel" }).isVisible()).toBe(true);
    expect(JSON.parse(String(await rememberedTask()))).toMatchObject({ panel: "gen", mode: "async" });

    await page.reload();
    await containsText(page.locator("#gen-result [data-status]"), "Queued, position 1 in the queue");
    expect(await page.getByRole("button", { name: "Cancel" }).isVisible()).toBe(true);
    expect(await page.locator("#gen-prompt").inputValue()).toBe("background lighthouse");
    expect(await page.locator("#gen-background").isChecked()).toBe(true);
    await shots("04-background-queued");

    openGate("blocker");
    await containsText(page.locator("#gen-result [data-status]"), "Running: 50 %");
    expect(await page.locator("#gen-result [data-progress]").evaluate((p: HTMLProgressElement) => p.value)).toBe(50);
    await shots("05-background-running");

    openGate("background");
    await finalImageShown();
    expect(await server.balance(userId)).toBe(before - 1);
  }, TEST_TIMEOUT_MS);

  test("a queued background task can be canceled: the credit is refunded", async () => {
    gates.delete("blocker");
    const other = await server.userWithKey({ credits: 2 });
    const blocker = await fetch(`${server.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${other.key}`, "content-type": "application/json", prefer: "respond-async" },
      body: JSON.stringify({ prompt: "blocker again", size: "64x64" }),
    });
    expect(blocker.status).toBe(202);
    const before = await server.balance(userId);

    await startGenerate("background to cancel", true);
    await containsText(page.locator("#gen-result [data-status]"), "Queued");
    await page.getByRole("button", { name: "Cancel" }).click();
    await containsText(page.locator("#gen-result [data-error]"), "Canceled. The credit was refunded.");
    // A cancel the user asked for is a notice, not an error.
    expect(await page.locator("#gen-result [data-error]").getAttribute("class")).toBe("msg notice");
    expect(await page.locator("#gen-result [data-busy]").isHidden()).toBe(true);
    expect(await rememberedTask()).toBeNull();
    expect(await server.balance(userId)).toBe(before);
    await shots("06-background-canceled");
    openGate("blocker");
  }, TEST_TIMEOUT_MS);

  test("an edit streams too, and no text from the server is ever markup", async () => {
    await page.getByRole("tab", { name: "Edit" }).click();
    await page.locator("#edit-image").setInputFiles({ name: "base.png", mimeType: "image/png", buffer: Buffer.from(makePng(64, 64)) });
    await page.locator("#edit-prompt").fill("previews <img src=x onerror=alert(1)>");
    await page.locator("#edit-size").selectOption(SIZE);
    gates.delete("final");
    await page.getByRole("button", { name: "Edit (1 credit)" }).click();
    await containsText(page.locator("#edit-result [data-preview-caption]"), "Preview 2 of 2");
    openGate("final");
    const image = page.locator("#edit-result img[data-image]");
    await image.waitFor({ state: "visible", timeout: 30_000 });
    expect(await page.locator("#edit-result img").count()).toBe(2); // the preview and the image, nothing injected
  }, TEST_TIMEOUT_MS);

  test("signing out forgets the running request: the next user in this tab never gets its prompt back", async () => {
    await page.locator("#tab-generate").click();
    gates.delete("background");
    await startGenerate("background and my private prompt", true);
    // The status line may still read "Running" from the earlier task: wait for this one's record.
    for (let i = 0; i < 150 && (await rememberedTask()) === null; i++) await Bun.sleep(100);
    expect(JSON.parse(String(await rememberedTask()))).toMatchObject({ panel: "gen", mode: "async" });
    await containsText(page.locator("#gen-result [data-status]"), "Running: 50 %");

    await page.locator('form[action="/signout"] button').click();
    await page.waitForURL(/\/signin/);
    expect(await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith("atelier.playground.")))).toEqual([]);

    const next = await server.userWithKey({ email: "next-in-tab@example.com", credits: 2, password: PASSWORD });
    await signInThroughForm(page, server.url, next.email, PASSWORD);
    await page.waitForURL(/\/playground/);
    expect(await page.locator("#gen-prompt").inputValue()).toBe("");
    expect(await page.locator("#gen-result [data-status]").isHidden()).toBe(true);
    openGate("background");
  }, TEST_TIMEOUT_MS);
});
