/**
 * Redemption codes through the workbench's HTTP forms (app.handle, real store in memory): an
 * admin makes a batch (codes shown once), users redeem on the credits page, same-origin and CSRF
 * rules, concurrent redemptions of one code, the throttle, and no code in any log line.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { workbenchApp } from "../support/workbenchApp";

// Generous: every test signs users in (argon2id hashing), slow on a shared 2-core machine.
const TIMEOUT_MS = 60_000;
let app: ReturnType<typeof workbenchApp> | undefined;
afterEach(() => app?.close());

/** A fresh workbench for one test, closed after it. */
async function makeApp() {
  app = workbenchApp();
  return app;
}

const codesIn = (page: string) => [...page.matchAll(/\b([2-9A-HJ-NP-Z]{5}(?:-[2-9A-HJ-NP-Z]{5}){3})\b/g)].map((m) => m[1]!);

async function batch(admin: { post: (p: string, f: Record<string, string>) => Promise<Response> }, fields: Record<string, string>) {
  const res = await admin.post("/admin/codes", fields);
  const page = await res.text();
  return { res, page, codes: [...new Set(codesIn(page))] };
}

describe("admin: a batch of codes", () => {
  test("is shown once with its CSV, then listed without its codes; users cannot make one; bad input is a 400 that makes nothing", async () => {
    const { handle, session, store, logs } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const user = await session("user@example.com");

    const { res, page, codes } = await batch(admin, { name: "spring <b>workshop</b>", credits: "25", count: "3", expires_days: "30" });
    expect(res.status).toBe(201);
    expect(codes).toHaveLength(3);
    expect(page).toContain("spring &lt;b&gt;workshop&lt;/b&gt;");
    const csvHref = /href="data:text\/csv;charset=utf-8,([^"]+)" download="atelier-codes-batch-(\d+)\.csv"/.exec(page)!;
    const csv = decodeURIComponent(csvHref[1]!).split("\r\n");
    expect(csv[0]).toBe("code,credits,expires_at,batch_id,batch_name");
    expect(csv.slice(1, 4).map((l) => l.split(",")[0])).toEqual(codes);
    expect(csv[1]).toContain(`,25,`);

    const list = await (await handle("/admin/codes", { headers: { cookie: admin.cookie } })).text();
    expect(codesIn(list)).toEqual([]);
    expect(list).toContain("0 / 3");
    expect(list).toContain("admin:boss@example.com");

    expect((await user.post("/admin/codes", { name: "mine", credits: "1000", count: "1" })).status).toBe(403);
    for (const bad of [{ credits: "0" }, { credits: "2.5" }, { count: "10001" }, { count: "" }, { name: "" }, { expires_days: "0" }, { expires_days: "soon" }]) {
      const refused = await batch(admin, { name: "b", credits: "5", count: "2", expires_days: "", ...bad });
      expect(refused.res.status).toBe(400);
      expect(refused.codes).toEqual([]);
      expect(refused.page).toContain('role="alert"');
    }
    expect(await store!.redemptions.listBatches(10)).toHaveLength(1);
    for (const c of codes) expect(logs.join("\n")).not.toContain(c);
  }, TIMEOUT_MS);
});

describe("users: redeeming on the credits page", () => {
  test("a code credits once, shows in the ledger, and a used, unknown or malformed code is refused with its reason", async () => {
    const { handle, session, store, logs } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const user = await session("user@example.com");
    const other = await session("other@example.com");
    const { codes: [code] } = await batch(admin, { name: "promo", credits: "40", count: "1", expires_days: "" });

    const ok = await user.post("/credits/redeem", { code: code!.toLowerCase().replace(/-/g, " ") });
    expect(ok.status).toBe(303);
    const [entry] = await store!.credits.ledger(user.id, 1);
    expect(entry).toMatchObject({ kind: "redeem", amount: 40 });
    expect(ok.headers.get("location")).toBe(`/credits?redeemed=${entry!.id}#redeem`);
    expect(await store!.credits.balance(user.id)).toBe(40);
    const credits = await (await handle(ok.headers.get("location")!.replace(/#.*/, ""), { headers: { cookie: user.cookie } })).text();
    expect(credits).toContain("Code redeemed: +40 credits.");
    // The notice comes from the user's own redeem row: a hand-made link, another user's row or
    // a row of another kind claims nothing.
    for (const link of ["/credits?redeemed=500000", "/credits?redeemed=40"]) {
      expect(await (await handle(link, { headers: { cookie: user.cookie } })).text()).not.toContain("Code redeemed");
    }
    expect(await (await handle(`/credits?redeemed=${entry!.id}`, { headers: { cookie: other.cookie } })).text()).not.toContain("Code redeemed");
    expect(credits).toMatch(/<td>redeem<\/td>\s*<td class="num plus">\+40<\/td>/);

    const again = await other.post("/credits/redeem", { code: code! });
    expect(again.status).toBe(409);
    expect(await again.text()).toContain("This code was already redeemed.");
    expect((await other.post("/credits/redeem", { code: "ABCDE-FGHJK-LMNPQ-RSTUV" })).status).toBe(400);
    const malformed = await other.post("/credits/redeem", { code: "<script>x</script>" });
    expect(malformed.status).toBe(400);
    const text = await malformed.text();
    expect(text).toContain("That is not a redemption code");
    expect(text).toContain('value="&lt;script&gt;x&lt;/script&gt;"');
    expect(await store!.credits.balance(other.id)).toBe(0);
    expect(await store!.credits.ledgerMismatches()).toBe(0);
    expect(logs.join("\n")).not.toContain(code!);
    expect(logs.join("\n")).not.toContain(code!.replace(/-/g, ""));
  }, TIMEOUT_MS);

  test("without the CSRF token, or from another origin, nothing is redeemed", async () => {
    const { session, form, store } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const user = await session("user@example.com");
    const { codes: [code] } = await batch(admin, { name: "p", credits: "5", count: "1" });
    expect((await form("/credits/redeem", { code: code! }, { cookie: user.cookie })).status).toBe(403);
    expect((await form("/credits/redeem", { code: code!, _csrf: user.csrf }, { cookie: user.cookie, origin: "http://evil.test" })).status).toBe(403);
    expect((await form("/credits/redeem", { code: code!, _csrf: "x".repeat(user.csrf.length) }, { cookie: user.cookie })).status).toBe(403);
    expect(await store!.credits.balance(user.id)).toBe(0);
    expect((await user.post("/credits/redeem", { code: code! })).status).toBe(303);
  }, TIMEOUT_MS);

  test("ten users posting one code at the same time: one is credited", async () => {
    const { session, store } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const users = await Promise.all(Array.from({ length: 10 }, (_, i) => session(`racer${i}@example.com`)));
    const { codes: [code] } = await batch(admin, { name: "race", credits: "9", count: "1" });
    const statuses = await Promise.all(users.map((u) => u.post("/credits/redeem", { code: code! }).then((r) => r.status)));
    expect(statuses.filter((s) => s === 303)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(9);
    expect((await Promise.all(users.map(async (u) => (await store!.credits.balance(u.id))!))).reduce((a, b) => a + b, 0)).toBe(9);
    expect(await store!.credits.ledgerMismatches()).toBe(0);
  }, TIMEOUT_MS);

  test("after 10 failed attempts the user is throttled (429, retry-after), even with a good code", async () => {
    const { session, store } = await makeApp();
    const admin = await session("boss@example.com", "admin");
    const user = await session("user@example.com");
    const { codes: [code] } = await batch(admin, { name: "p", credits: "5", count: "1" });
    for (let i = 0; i < 10; i++) expect((await user.post("/credits/redeem", { code: "ABCDE-FGHJK-LMNPQ-RSTUV" })).status).toBe(400);
    const throttled = await user.post("/credits/redeem", { code: code! });
    expect(throttled.status).toBe(429);
    expect(Number(throttled.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(await throttled.text()).toContain("Too many failed attempts");
    expect(await store!.credits.balance(user.id)).toBe(0);
  }, TIMEOUT_MS);
});
