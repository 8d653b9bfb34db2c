/**
 * Upstream engines end to end: a real listening server configured with upstreams that point
 * at fake OpenAI and WebUI servers on loopback, driven by the official `openai` client.
 * Each scenario has its own upstream entry (same fakes, different account keys) so pool state
 * from one scenario cannot leak into another while the suite shares one server.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI, { APIError, toFile } from "openai";
import { enableUpstreamAccount, showUpstreams } from "../../src/cli/upstreams";
import { FAKE_IMAGE_USAGE, startFakeOpenAI, startFakeWebUI, type FakeUpstream, type FakeWebUI } from "../support/fakeUpstreams";
import { until } from "../support/until";
import { dataUrl, makePng, readPng } from "../support/images";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const KEYS = {
  h1: "sk-e2e-happy-one-0000000000000001",
  h2: "sk-e2e-happy-two-0000000000000002",
  r1: "sk-e2e-ratelimited-000000000000003",
  r2: "sk-e2e-ratelimited-000000000000004",
  x1: "sk-e2e-revoked-000000000000000005",
  x2: "sk-e2e-working-000000000000000006",
  y1: "sk-e2e-rejecting-0000000000000007",
  f1: "sk-e2e-failing-000000000000000008",
  f2: "sk-e2e-failing-000000000000000009",
};
const SD_PASSWORD = "sd-e2e-password-000000000010";
const ALL_SECRETS = [...Object.values(KEYS), SD_PASSWORD];

let openai: FakeUpstream;
let webui: FakeWebUI;
let server: TestServer;
/** The same TOML the server runs with, as a file, for CLI processes. */
let tomlFile: string;
/** Every response body the clients saw, to search for secrets at the end. */
const bodies: string[] = [];

const recordingFetch: typeof fetch = Object.assign(
  async (input: Parameters<typeof fetch>[0], init?: Parameters<typeof fetch>[1]) => {
    const res = await fetch(input, init);
    bodies.push(await res.clone().text());
    return res;
  },
  { preconnect: fetch.preconnect },
);

const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0, fetch: recordingFetch });

function upstream(id: string, accounts: [string, string, number][], base = "") {
  const list = accounts.map(([name, key, max]) => `{ id = "${name}", api_key = "${key}", max_concurrency = ${max} }`).join(", ");
  return `
[[upstreams]]
id = "${id}"
kind = "openai"
base_url = "${openai.url}/v1"
timeout_ms = 500
${base}
accounts = [ ${list} ]
`;
}

function model(id: string, up: string, kind = "image", upstreamModel = id) {
  return `
[[models]]
id = "${id}"
kind = "${kind}"
upstream = "${up}"
upstream_model = "${upstreamModel}"
`;
}

beforeAll(async () => {
  openai = startFakeOpenAI();
  webui = startFakeWebUI();
  openai.alwaysFault(KEYS.r1, { kind: "429", retryAfter: "20" });
  openai.alwaysFault(KEYS.r2, { kind: "429", retryAfterMs: "9000" });
  openai.alwaysFault(KEYS.x1, { kind: "status", status: 401, message: `Incorrect API key provided: ${KEYS.x1}.` });
  openai.alwaysFault(KEYS.y1, { kind: "status", status: 400, message: `Your request was rejected as a result of our safety system (account key ${KEYS.y1}).` });
  openai.alwaysFault(KEYS.f1, { kind: "status", status: 500, message: "The server had an error" });
  openai.alwaysFault(KEYS.f2, { kind: "status", status: 503, message: "overloaded" });
  const toml = [
    `[limits]\ngeneration_concurrency = 16\nper_user_concurrency = 16\nqueue_size = 64\nqueue_timeout_ms = 10000\ngeneration_timeout_ms = 10000\n`,
    upstream("oa", [["h1", KEYS.h1, 2], ["h2", KEYS.h2, 1]]),
    upstream("oa429", [["r1", KEYS.r1, 1], ["r2", KEYS.r2, 1]]),
    upstream("oa401", [["x1", KEYS.x1, 1], ["x2", KEYS.x2, 1]]),
    upstream("oa400", [["y1", KEYS.y1, 1]]),
    upstream("oafail", [["f1", KEYS.f1, 1], ["f2", KEYS.f2, 1]]),
    `
[[upstreams]]
id = "sd"
kind = "sdwebui"
base_url = "${webui.url}"
timeout_ms = 2000
accounts = [ { id = "gpu", username = "artist", password = "${SD_PASSWORD}", max_concurrency = 1 } ]
`,
    `
[[upstreams]]
id = "sdtask"
kind = "sdwebui"
base_url = "${webui.url}"
timeout_ms = 10000
accounts = [ { id = "gpu-t", username = "tasker", password = "${SD_PASSWORD}", max_concurrency = 1 } ]
`,
    model("gpt-image-1", "oa", "image", "gpt-image-up"),
    model("gpt-chat", "oa", "chat", "gpt-chat-up"),
    model("rl-image", "oa429"),
    model("auth-image", "oa401"),
    model("rej-image", "oa400"),
    model("fail-image", "oafail"),
    `${model("sd-image", "sd")}params = { sampler_name = "Euler a", cfg_scale = 7, checkpoint = "dreamshaper_8.safetensors" }\n`,
    model("sd-task-image", "sdtask"),
  ].join("\n");
  server = await startTestServer({ toml });
  tomlFile = join(tempDir("atelier-upstreams-cli-"), "atelier.toml");
  writeFileSync(tomlFile, toml);
});

afterAll(async () => {
  await server.close();
  await openai.stop();
  await webui.stop();
});

const lastRequestOf = async (userId: number) => (await server.services.store.requests.list({ userId, limit: 1 }))[0]!;
const received = (fake: FakeUpstream, key: string) => fake.received.filter((r) => r.account === key);

async function apiError(p: Promise<unknown>): Promise<APIError> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(APIError);
  return e as APIError;
}

describe("happy paths through the official openai client", () => {
  test("chat: the upstream gets its model id and our params; the client gets our public model id", async () => {
    const u = await server.userWithKey();
    const res = await client(u.key).chat.completions.create({ model: "gpt-chat", messages: [{ role: "user", content: "hi there" }], temperature: 0.3 });
    expect(res.choices[0]!.message.content).toBe("echo: hi there");
    expect(res.model).toBe("gpt-chat");
    const got = openai.received.filter((r) => r.path === "/v1/chat/completions").at(-1)!;
    expect(got.json).toMatchObject({ model: "gpt-chat-up", temperature: 0.3, messages: [{ role: "user", content: "hi there" }] });
    expect(await lastRequestOf(u.userId)).toMatchObject({ kind: "chat", upstream_id: "oa", attempts: 1 });
  });

  test("generation: JSON to /images/generations, a real PNG back, 1 credit, history with upstream and account", async () => {
    const u = await server.userWithKey({ credits: 3 });
    const before = openai.received.length;
    const res = await client(u.key).images.generate({ model: "gpt-image-1", prompt: "a fox", size: "96x64" as "1024x1024" });
    const png = readPng(new Uint8Array(Buffer.from(res.data![0]!.b64_json!, "base64")));
    expect([png.width, png.height]).toEqual([96, 64]);
    // The upstream's token usage passes through (openai-node's ImagesResponse.usage).
    expect(res.usage).toEqual(FAKE_IMAGE_USAGE);
    const got = openai.received.slice(before);
    expect(got).toHaveLength(1);
    expect(got[0]!.path).toBe("/v1/images/generations");
    expect(got[0]!.json).toMatchObject({ model: "gpt-image-up", prompt: "a fox", size: "96x64" });
    expect(await server.balance(u.userId)).toBe(2);
    const row = await lastRequestOf(u.userId);
    expect(row).toMatchObject({ status: "succeeded", upstream_id: "oa", attempts: 1 });
    expect(["h1", "h2"]).toContain(row.account_id!);
    expect(row.upstream_latency_ms).toBeGreaterThanOrEqual(0);
  });

  test("generation with reference images arrives upstream as image[] multipart parts", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const refs = [makePng(32, 32, () => [200, 0, 0, 255]), makePng(40, 20, () => [0, 0, 200, 255])];
    const before = openai.received.length;
    const params = { model: "gpt-image-1", prompt: "mix these", size: "64x64", reference_images: refs.map((r) => dataUrl(r)) };
    const res = await client(u.key).images.generate(params as unknown as OpenAI.Images.ImageGenerateParamsNonStreaming);
    expect(readPng(new Uint8Array(Buffer.from(res.data![0]!.b64_json!, "base64"))).width).toBe(64);
    const got = openai.received.slice(before)[0]!;
    expect(got.path).toBe("/v1/images/edits");
    expect(got.files!.map((f) => f.name)).toEqual(["image[]", "image[]"]);
    expect(got.files!.map((f) => readPng(f.bytes).width)).toEqual([32, 40]);
    expect(got.fields!.prompt).toEqual(["mix these"]);
  });

  test("edit with a mask: multipart image and mask upstream", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const before = openai.received.length;
    const image = await toFile(makePng(64, 64, (x) => [x * 4, 10, 10, 255]), "photo.png", { type: "image/png" });
    const mask = await toFile(makePng(64, 64, (x) => [0, 0, 0, x < 32 ? 0 : 255]), "mask.png", { type: "image/png" });
    const res = await client(u.key).images.edit({ model: "gpt-image-1", image, mask, prompt: "add a moon" });
    expect(res.data![0]!.b64_json).toBeTruthy();
    const got = openai.received.slice(before)[0]!;
    expect(got.path).toBe("/v1/images/edits");
    expect(got.files!.map((f) => f.name).sort()).toEqual(["image", "mask"]);
    expect(await server.balance(u.userId)).toBe(0);
  });

  test("a url answer reaches the client as b64_json, with the upstream's revised_prompt", async () => {
    const u = await server.userWithKey({ credits: 1 });
    openai.alwaysFault(KEYS.h1, { kind: "url" });
    openai.alwaysFault(KEYS.h2, { kind: "url" });
    openai.setRevisedPrompt("a fox, revised");
    try {
      const res = await client(u.key).images.generate({ model: "gpt-image-1", prompt: "a fox", size: "64x64" as "1024x1024" });
      expect(readPng(new Uint8Array(Buffer.from(res.data![0]!.b64_json!, "base64"))).width).toBe(64);
      expect(res.data![0]!.revised_prompt).toBe("a fox, revised");
    } finally {
      openai.alwaysFault(KEYS.h1, undefined);
      openai.alwaysFault(KEYS.h2, undefined);
      openai.setRevisedPrompt(undefined);
    }
  });

  test("sdwebui model: txt2img with size, quality → steps, params and checkpoint, basic auth", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const res = await client(u.key).images.generate({ model: "sd-image", prompt: "a tower", size: "96x64" as "1024x1024", quality: "high" });
    expect(readPng(new Uint8Array(Buffer.from(res.data![0]!.b64_json!, "base64"))).height).toBe(64);
    const got = webui.received.at(-1)!;
    expect(got.path).toBe("/sdapi/v1/txt2img");
    expect(got.json).toMatchObject({ prompt: "a tower", width: 96, height: 64, steps: 40, sampler_name: "Euler a", cfg_scale: 7, override_settings: { sd_model_checkpoint: "dreamshaper_8.safetensors" } });
    expect(got.account).toBe("artist");
    expect(await lastRequestOf(u.userId)).toMatchObject({ upstream_id: "sd", account_id: "gpu", attempts: 1 });
  });
});

describe("sdwebui: an abandoned generation", () => {
  test("an async task canceled while its generation runs: the WebUI interrupts that generation (ours, by its task id) before the cancel answers; refunded", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const auth = { authorization: `Bearer ${u.key}` };
    const tasksBefore = webui.tasks.length;
    const interruptsBefore = webui.interrupts.length;
    webui.holdGenerations(true);
    try {
      const submitted = await fetch(`${server.url}/v1/images/generations`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json", prefer: "respond-async" },
        body: JSON.stringify({ model: "sd-task-image", prompt: "a lighthouse", size: "64x64" }),
      });
      expect(submitted.status).toBe(202);
      const { id } = (await submitted.json()) as { id: string };
      await until(() => webui.tasks.slice(tasksBefore).some((t) => t.state === "running"), "the task's generation to run on the WebUI");
      const ours = webui.tasks.slice(tasksBefore).find((t) => t.state === "running")!;
      const sent = webui.received.find((r) => r.path === "/sdapi/v1/txt2img" && r.json?.force_task_id === ours.id)!;
      expect(sent.account).toBe("tasker");
      const cancel = await fetch(`${server.url}/v1/images/tasks/${id}/cancel`, { method: "POST", headers: auth });
      expect(cancel.status).toBe(200);
      expect(await cancel.json()).toMatchObject({ id, status: "canceled", error: { code: "task_canceled" } });
      expect(webui.interrupts.slice(interruptsBefore)).toEqual([{ stopped: ours.id }]);
      expect(ours.state).toBe("interrupted");
      expect(webui.received.filter((r) => r.path === "/sdapi/v1/interrupt").at(-1)!.account).toBe("tasker");
      expect(await server.balance(u.userId)).toBe(1);
    } finally {
      webui.holdGenerations(false);
      webui.finishRunning();
    }
  });
});

describe("faults through the server", () => {
  test("every account 429: our 429 upstream_rate_limited with retry-after of the earliest recovery; refunded", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const e = await apiError(client(u.key).images.generate({ model: "rl-image", prompt: "x", size: "64x64" as "1024x1024" }));
    expect(e.status).toBe(429);
    expect((e.error as { code: string }).code).toBe("upstream_rate_limited");
    const retryAfter = Number(e.headers?.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(8);
    expect(retryAfter).toBeLessThanOrEqual(9);
    expect(Number(e.headers?.get("retry-after-ms"))).toBeLessThanOrEqual(9000);
    expect(await server.balance(u.userId)).toBe(1);
    expect(await lastRequestOf(u.userId)).toMatchObject({ status: "failed", credits_refunded: 1, upstream_id: "oa429", attempts: 2 });
    // Both accounts now cool down: the next request is refused without asking the upstream.
    const asked = received(openai, KEYS.r1).length + received(openai, KEYS.r2).length;
    const again = await apiError(client(u.key).images.generate({ model: "rl-image", prompt: "x", size: "64x64" as "1024x1024" }));
    expect(again.status).toBe(429);
    expect(received(openai, KEYS.r1).length + received(openai, KEYS.r2).length).toBe(asked);
    expect(await server.balance(u.userId)).toBe(1);
  });

  test("5xx on every attempt: 502 upstream_error after max_attempts; refunded; the attempts recorded", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const e = await apiError(client(u.key).images.generate({ model: "fail-image", prompt: "x", size: "64x64" as "1024x1024" }));
    expect(e.status).toBe(502);
    expect((e.error as { type: string }).type).toBe("upstream_error");
    expect(await server.balance(u.userId)).toBe(1);
    const row = await lastRequestOf(u.userId);
    expect(row).toMatchObject({ status: "failed", credits_refunded: 1, upstream_id: "oafail", attempts: 3 });
    expect(["f1", "f2"]).toContain(row.account_id!);
  });

  test("upstream 400: our 400 invalid_request_error with the upstream's message (key redacted), no retry, refunded", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const e = await apiError(client(u.key).images.generate({ model: "rej-image", prompt: "x", size: "64x64" as "1024x1024" }));
    expect(e.status).toBe(400);
    expect((e.error as { type: string }).type).toBe("invalid_request_error");
    expect(e.message).toContain("rejected as a result of our safety system");
    expect(e.message).not.toContain(KEYS.y1);
    expect(received(openai, KEYS.y1)).toHaveLength(1);
    expect(await server.balance(u.userId)).toBe(1);
  });

  test("401 disables the account (served by the other); visible to admins; re-enabled by the admin route and the CLI", async () => {
    const u = await server.userWithKey({ credits: 4 });
    const admin = await server.userWithKey({ role: "admin" });
    const res = await client(u.key).images.generate({ model: "auth-image", prompt: "x", size: "64x64" as "1024x1024" });
    expect(res.data![0]!.b64_json).toBeTruthy();
    expect(await lastRequestOf(u.userId)).toMatchObject({ status: "succeeded", upstream_id: "oa401", account_id: "x2", attempts: 2 });
    expect(server.logs.some((l) => l.includes("disabled") && l.includes('"account":"x1"'))).toBe(true);

    const view = async (key: string) => {
      const r = await fetch(`${server.url}/admin/api/upstreams`, { headers: { authorization: `Bearer ${key}` } });
      const text = await r.text();
      bodies.push(text);
      return { status: r.status, body: JSON.parse(text) };
    };
    expect((await view(u.key)).status).toBe(403);
    const adminView = await view(admin.key);
    expect(adminView.status).toBe(200);
    const oa401 = adminView.body.data.find((x: { id: string }) => x.id === "oa401");
    expect(oa401.accounts.find((a: { id: string }) => a.id === "x1")).toMatchObject({ state: "disabled", in_flight: 0, max_concurrency: 1 });
    expect(oa401.accounts.find((a: { id: string }) => a.id === "x2")).toMatchObject({ state: "healthy" });

    // The CLI, reading the same database as another process would, shows it disabled.
    const { config, store } = server.services;
    const table = (await showUpstreams(config, store, Date.now(), false)).join("\n");
    expect(table).toMatch(/oa401\tx1\t0\t1\t1\tdisabled \(upstream answered 401/);
    for (const s of ALL_SECRETS) expect(table).not.toContain(s);

    // Enable through the admin route: the next request tries x1 again.
    const enable = await fetch(`${server.url}/admin/api/upstreams/oa401/accounts/x1/enable`, { method: "POST", headers: { authorization: `Bearer ${admin.key}` } });
    bodies.push(await enable.clone().text());
    expect(enable.status).toBe(200);
    expect(await enable.json()).toEqual({ upstream: "oa401", account: "x1", enabled: true, was_disabled: true });
    // Equal weights alternate, so within two requests x1 is tried once (and disabled again).
    const x1Before = received(openai, KEYS.x1).length;
    for (let i = 0; i < 2; i++) await client(u.key).images.generate({ model: "auth-image", prompt: "x", size: "64x64" as "1024x1024" });
    expect(received(openai, KEYS.x1).length).toBe(x1Before + 1);
    expect(await server.balance(u.userId)).toBe(1);

    // And through the CLI's code path, writing the database the server reads on every pick.
    expect(await enableUpstreamAccount(config, store, "oa401", "x1")).toContain("enabled oa401/x1");
    const view2 = await view(admin.key);
    expect(view2.body.data.find((x: { id: string }) => x.id === "oa401").accounts[0].state).toBe("healthy");
    const missing = await fetch(`${server.url}/admin/api/upstreams/oa401/accounts/nope/enable`, { method: "POST", headers: { authorization: `Bearer ${admin.key}` } });
    expect(missing.status).toBe(404);
    bodies.push(await missing.text());
  });

  test("`atelier upstreams` and `atelier upstreams enable` in another process, against the running server", async () => {
    const u = await server.userWithKey({ credits: 3 });
    for (let i = 0; i < 3 && !(await server.services.store.upstreams.disabledAccounts("oa401")).has("x1"); i++) {
      await client(u.key).images.generate({ model: "auth-image", prompt: "x", size: "64x64" as "1024x1024" });
    }
    expect((await server.services.store.upstreams.disabledAccounts("oa401")).has("x1")).toBe(true);
    await Promise.all(server.services.upstreams.list().map((p) => p.persistSnapshot()));
    const cli = async (...args: string[]) => {
      const proc = Bun.spawn(["bun", "src/main.ts", ...args, "--config", tomlFile, "--data", server.dataDir], { stdout: "pipe", stderr: "pipe", env: { ...process.env, ATELIER_CONFIG: "", ...server.childEnv } });
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { stdout, stderr, code };
    };
    const shown = await cli("upstreams");
    expect(shown.code).toBe(0);
    const lines = shown.stdout.trim().split("\n");
    expect(lines[0]).toBe("UPSTREAM\tACCOUNT\tIN-FLIGHT\tCAPACITY\tWEIGHT\tSTATE\tRECENT FAILURES\tAS OF");
    const x1 = lines.find((l) => l.startsWith("oa401\tx1\t"))!;
    expect(x1).toMatch(/^oa401\tx1\t0\t1\t1\tdisabled \(upstream answered 401: credentials refused \(401\): Incorrect API key provided: \[redacted\]\.\)\t\d+ \(last auth at /);
    expect(x1).not.toContain("never reported");
    expect(lines.find((l) => l.startsWith("oa429\tr2\t"))).toMatch(/\tcooling until 20\d\d-/);
    expect(lines.find((l) => l.startsWith("oa\th1\t"))).toMatch(/^oa\th1\t0\t2\t1\thealthy\t/);
    for (const secret of ALL_SECRETS) expect(shown.stdout).not.toContain(secret);

    const enabled = await cli("upstreams", "enable", "oa401", "x1");
    expect(enabled).toMatchObject({ code: 0 });
    expect(enabled.stdout).toContain("enabled oa401/x1");
    // The running server sees it without a restart.
    const admin = await server.userWithKey({ role: "admin" });
    const view = await (await fetch(`${server.url}/admin/api/upstreams`, { headers: { authorization: `Bearer ${admin.key}` } })).json();
    expect(view.data.find((x: { id: string }) => x.id === "oa401").accounts[0]).toMatchObject({ id: "x1", state: "healthy" });

    const unknown = await cli("upstreams", "enable", "oa401", "nope");
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("no account 'nope' (known: x1, x2)");
  });

  test("under a burst no account sees more concurrent requests than its max_concurrency", async () => {
    const u = await server.userWithKey({ credits: 12 });
    openai.setLatency(40);
    openai.maxConcurrent.clear();
    try {
      const c = client(u.key);
      const results = await Promise.all(Array.from({ length: 12 }, () => c.images.generate({ model: "gpt-image-1", prompt: "burst", size: "64x64" as "1024x1024" })));
      expect(results.every((r) => typeof r.data![0]!.b64_json === "string")).toBe(true);
    } finally {
      openai.setLatency(0);
    }
    expect(openai.maxConcurrent.get(KEYS.h1)).toBe(2);
    expect(openai.maxConcurrent.get(KEYS.h2)).toBe(1);
    expect(await server.balance(u.userId)).toBe(0);
  });
});

describe("secrets", () => {
  test("no upstream key or password appears in any log line, response body or history row", async () => {
    expect(bodies.length).toBeGreaterThan(10);
    // The server writes its pool snapshot for the CLI; that must be clean too.
    await Promise.all(server.services.upstreams.list().map((p) => p.persistSnapshot()));
    const history = JSON.stringify(await server.services.store.requests.list({ limit: 500 }));
    const snapshots = JSON.stringify([...(await server.services.store.upstreams.loadSnapshots()).values()]);
    const haystacks = { logs: server.logs.join("\n"), bodies: bodies.join("\n"), history, snapshots };
    for (const [where, text] of Object.entries(haystacks)) {
      for (const secret of ALL_SECRETS) {
        if (text.includes(secret)) throw new Error(`${where} contains the secret ${secret.slice(0, 12)}…`);
      }
    }
    expect(server.logs.length).toBeGreaterThan(0);
  });
});
