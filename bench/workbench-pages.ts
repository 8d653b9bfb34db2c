/**
 * How long the workbench takes to render its heaviest pages (in-process, app.handle, no
 * network): /playground, /credits with a full page of history and 100 ledger rows, and /admin
 * with 200 users. Prints p50/p95 per page. Run: bun bench/workbench-pages.ts
 */
import { createApp } from "../src/app";
import { createServices } from "../src/services";
import { loadConfig } from "../src/config";
import { addUser } from "../src/core/accounts";
import { silentLogger } from "../src/logger";
import { createStore } from "../src/store";
import { latestVersion, openDatabase } from "../src/store/database";

const config = loadConfig({ env: {} });
const store = createStore(openDatabase(":memory:"), latestVersion());
const app = createApp(createServices({ config, store, logger: silentLogger }));
const base = "http://bench.local";

await addUser(store, Date.now, { email: "admin@example.com", password: "bench password", role: "admin", credits: 0 });
const signin = await app.handle(
  new Request(`${base}/signin`, { method: "POST", headers: { origin: base, "content-type": "application/x-www-form-urlencoded" }, body: "email=admin%40example.com&password=bench+password" }),
);
const cookie = signin.headers.get("set-cookie")!.split(";")[0]!;
const admin = (await store.users.byEmail("admin@example.com"))!;
for (let i = 0; i < 200; i++) await store.users.create({ email: `u${i}@example.com`, passwordHash: null, role: "user", credits: 5 }, Date.now());
for (let i = 0; i < 100; i++) (await store.credits.grant(admin.id, 1, Date.now(), `grant ${i}`, "bench"));
for (let i = 0; i < 1000; i++) {
  store.requests.recordChat({ id: `c${i}`, userId: admin.id, keyId: null, model: "builtin-chat", status: "succeeded", prompt: `prompt number ${i} <with markup>` }, Date.now());
}

async function measure(path: string, runs = 200): Promise<void> {
  const times: number[] = [];
  let bytes = 0;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const res = await app.handle(new Request(`${base}${path}`, { headers: { cookie } }));
    bytes = (await res.text()).length;
    times.push(performance.now() - t0);
    if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
  }
  times.sort((a, b) => a - b);
  const p = (q: number) => times[Math.min(times.length - 1, Math.floor(q * times.length))]!.toFixed(2);
  console.log(`${path.padEnd(22)} p50 ${p(0.5)} ms  p95 ${p(0.95)} ms  ${(bytes / 1024).toFixed(1)} KiB`);
}

for (const path of ["/playground", "/keys", "/credits", "/credits?page=20", "/admin", "/admin/requests"]) await measure(path);
await store.close();
