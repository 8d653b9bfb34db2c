/**
 * Debian's chromium driven by playwright-core: the one launch configuration and the one password
 * sign-in every browser test uses (each test file used to carry its own copy of both).
 */
import { chromium, type Browser, type Page } from "playwright-core";

export const CHROMIUM = "/usr/bin/chromium";

/** Headless, no sandbox (CI runs as root), nothing that reaches the network on its own. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/**
 * Signs in through the workbench's form and waits until the browser has left /signin. The fields
 * are found by id, not by label, so this works in every language the workbench speaks.
 */
export async function signInThroughForm(page: Page, baseUrl: string, email: string, password: string): Promise<void> {
  await page.goto(`${baseUrl}/signin`);
  await page.locator("#email").fill(email);
  await page.locator("#password").fill(password);
  await page.locator("form.stack button[type=submit]").click();
  await page.waitForURL((u) => !u.pathname.startsWith("/signin"));
}
