/**
 * The sign-in and redemption throttles over HTTP against a real server with the default limits
 * (5 per account, 10 failed redemptions per user, per 15 minutes): counted in memory on the
 * embedded pass, in Redis on the scaled pass (test/support/backend.ts). Guesses sent all at
 * once cannot all pass a check made before any is counted: of 40, exactly the limit is judged,
 * and the rest get the usual 429 (the same page for an unknown email as for a known one).
 * Before the fix only the scaled pass failed here: over HTTP, the in-memory check and record had
 * no real wait between them; test/core/attemptLimiter.test.ts makes that race directly.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startTestServer, type TestServer } from "../support/server";

const PASSWORD = "correct horse battery";
const UNKNOWN_CODE = "ABCDE-FGHJK-LMNPQ-RSTUV";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

function signIn(email: string, password: string): Promise<Response> {
  return fetch(`${server.url}/signin`, {
    method: "POST",
    redirect: "manual",
    headers: { origin: server.url, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ email, password }),
  });
}

/** Each response's status (bodies read), in order. */
async function statuses(responses: Promise<Response>[]): Promise<{ status: number; text: string; retryAfter: string | null }[]> {
  return Promise.all(responses.map(async (p) => {
    const res = await p;
    return { status: res.status, text: await res.text(), retryAfter: res.headers.get("retry-after") };
  }));
}

const count = (rs: { status: number }[], status: number) => rs.filter((r) => r.status === status).length;

test("40 wrong passwords at once: 5 are checked (401), 35 are throttled (429), then the right password too; an unknown email alike", async () => {
  const { email } = await server.userWithKey({ password: PASSWORD });
  const pages: string[] = [];
  for (const who of [email, "nobody@example.com"]) {
    const answers = await statuses(Array.from({ length: 40 }, (_, i) => signIn(who, `guess-${i}`)));
    expect({ checked: count(answers, 401), throttled: count(answers, 429) }).toEqual({ checked: 5, throttled: 35 });
    const throttled = answers.find((a) => a.status === 429)!;
    expect(throttled.text).toContain("Too many sign-in attempts. Try again in 15 minutes.");
    pages.push(throttled.text.replace(who, "EMAIL"));
    const right = await signIn(who, PASSWORD);
    expect(right.status).toBe(429);
    expect(right.headers.get("set-cookie")).toBeNull();
    await right.text();
  }
  // No account enumeration: the throttled page is the same for a known and an unknown email.
  expect(pages[0]).toBe(pages[1]!);
}, 60_000);

test("40 unknown codes at once: 10 are judged (400), 30 are throttled (429 with Retry-After), then a good code too", async () => {
  const { email, userId } = await server.userWithKey({ password: PASSWORD });
  const session = await signIn(email, PASSWORD);
  expect(session.status).toBe(303);
  const cookie = session.headers.get("set-cookie")!.split(";")[0]!;
  const csrf = /name="csrf-token" content="([^"]+)"/.exec(await (await fetch(`${server.url}/credits`, { headers: { cookie } })).text())![1]!;
  const redeem = (code: string) =>
    fetch(`${server.url}/credits/redeem`, {
      method: "POST",
      redirect: "manual",
      headers: { origin: server.url, cookie, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ _csrf: csrf, code }),
    });
  const { codes: [good] } = await server.services.workbench.codes.createBatch({ name: "e2e", credits: 5, count: 1, expiresInDays: null, createdBy: "cli" });

  const answers = await statuses(Array.from({ length: 40 }, () => redeem(UNKNOWN_CODE)));
  expect({ judged: count(answers, 400), throttled: count(answers, 429) }).toEqual({ judged: 10, throttled: 30 });
  for (const a of answers.filter((a) => a.status === 429)) {
    expect(Number(a.retryAfter)).toBeGreaterThan(0);
    expect(Number(a.retryAfter)).toBeLessThanOrEqual(15 * 60);
    expect(a.text).toContain("Too many failed attempts");
  }
  const late = await redeem(good!);
  expect(late.status).toBe(429);
  await late.text();
  expect(await server.balance(userId)).toBe(0);
}, 60_000);
