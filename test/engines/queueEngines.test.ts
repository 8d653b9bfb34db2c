/**
 * The queue engines (fal, Replicate, Black Forest Labs) against loopback fakes of their APIs:
 * what we submit, polling through several statuses, downloading the result ourselves, and every
 * way a job or an account goes wrong ending in a retry, a typed error, or the provider's cancel.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import type { Config } from "../../src/config";
import { ModelCatalog } from "../../src/core/models";
import { EngineRegistry } from "../../src/engines/registry";
import { EngineTimeout, UpstreamFailed, UpstreamRateLimited, UpstreamRejected, UpstreamUnavailable, type ImageInput, type ImageJob } from "../../src/core/engine";
import { registerUpstreamEngines } from "../../src/engines/upstreams";
import { apiErrorOf } from "../../src/http/errorMapping";
import { MAX_POLL_RETRIES, onUpstreamSite, type QueueTranslator } from "../../src/engines/queue";
import { BflTranslator } from "../../src/engines/bfl";
import { FalTranslator } from "../../src/engines/fal";
import { ReplicateTranslator } from "../../src/engines/replicate";
import { createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { startFakeBfl, startFakeFal, startFakeReplicate, type FakeQueue, type QueueFakeKind } from "../support/fakeUpstreams";
import { makePng, readPng } from "../support/images";
import { configFromToml } from "../support/server";
import { until } from "../support/until";

const KEY_A = "queue-key-a-0123456789abcdef";
const KEY_B = "queue-key-b-fedcba9876543210";
const MODELS: Record<QueueFakeKind, string> = { fal: "fal-ai/flux/dev", replicate: "black-forest-labs/flux-schnell", bfl: "flux-pro-1.1" };

const fakes: Record<QueueFakeKind, FakeQueue> = { fal: startFakeFal(), replicate: startFakeReplicate(), bfl: startFakeBfl() };
afterAll(async () => {
  for (const f of Object.values(fakes)) await f.stop();
});
beforeEach(() => {
  for (const f of Object.values(fakes)) f.reset();
});

function build(kind: QueueFakeKind, opts: { model?: string; params?: string; extra?: string; timeoutMs?: number; accounts?: string } = {}) {
  const fake = fakes[kind];
  const accounts = opts.accounts ?? `{ id = "a", api_key = "${KEY_A}" }, { id = "b", api_key = "${KEY_B}" }`;
  const config: Config = configFromToml(`
[limits]
queue_timeout_ms = 5000
generation_timeout_ms = 8000

[[upstreams]]
id = "q"
kind = "${kind}"
base_url = "${fake.url}"
timeout_ms = ${opts.timeoutMs ?? 4000}
${opts.extra ?? ""}
accounts = [ ${accounts} ]

[[models]]
id = "pic"
kind = "image"
upstream = "q"
upstream_model = "${opts.model ?? MODELS[kind]}"
${opts.params ? `params = ${opts.params}` : ""}
`);
  const store = createStore(openDatabase(":memory:"), latestVersion());
  const registry = new EngineRegistry();
  const logs: string[] = [];
  const pools = registerUpstreamEngines(config, registry, { store: store.upstreams, clock: Date.now, logger: createLogger((l) => logs.push(l)), queuePollMs: 5 });
  const pic = new ModelCatalog(config).get("pic")!;
  const engine = registry.imageEngine(pic)!;
  const job = (over: Partial<ImageJob> = {}): ImageJob => ({ model: pic, prompt: "a red fox", size: { width: 48, height: 32 }, quality: "auto", images: [], extra: {}, signal: new AbortController().signal, ...over });
  return { fake, engine, job, store, logs, pool: pools.get("q")!, pic };
}

function input(width: number, height: number, alpha = false): ImageInput {
  return { bytes: makePng(width, height, (x) => [x * 10, 50, 60, alpha ? (x < width / 2 ? 0 : 255) : 255]), mime: "image/png", width, height };
}

const KINDS: QueueFakeKind[] = ["fal", "replicate", "bfl"];

describe("what each provider receives", () => {
  test("fal: POST /{app} with Authorization: Key, image_size, params passed through; status polled; response_url read", async () => {
    const { fake, engine, job } = build("fal", { params: `{ num_inference_steps = 12, enable_safety_checker = false, prompt = "not ours" }` });
    const img = await engine.generate(job());
    const [submit] = fake.submits();
    expect(submit!.path).toBe("/fal-ai/flux/dev");
    expect(submit!.authorization).toMatch(/^Key queue-key-[ab]-/);
    expect(submit!.json).toEqual({ num_inference_steps: 12, enable_safety_checker: false, prompt: "a red fox", num_images: 1, image_size: { width: 48, height: 32 } });
    const paths = fake.received.map((r) => `${r.method} ${r.path.replace(/job\d+/, "ID")}`);
    expect(paths).toEqual(["POST /fal-ai/flux/dev", "GET /fal-ai/flux/requests/ID/status", "GET /fal-ai/flux/requests/ID/status", "GET /fal-ai/flux/requests/ID/status", "GET /fal-ai/flux/requests/ID"]);
    expect(fake.received.slice(1).every((r) => r.authorization === submit!.authorization)).toBe(true);
    expect(readPng(img.bytes)).toMatchObject({ width: 48, height: 32 });
    expect(img.trace).toMatchObject({ upstreamId: "q", attempts: 1 });
  });

  test("fal: one reference as image_url, several as image_urls (data URIs), the mask as mask_url", async () => {
    const { fake, engine, job } = build("fal");
    const refs = [input(20, 20), input(30, 10)];
    await engine.generate(job({ images: refs.slice(0, 1) }));
    expect(fake.submits()[0]!.json!.image_url).toBe(`data:image/png;base64,${Buffer.from(refs[0]!.bytes).toString("base64")}`);
    await engine.generate(job({ images: refs }));
    expect((fake.submits()[1]!.json!.image_urls as string[]).length).toBe(2);
    await engine.edit(job({ images: [input(16, 16)], mask: input(16, 16, true) }));
    expect(String(fake.submits()[2]!.json!.mask_url)).toStartWith("data:image/png;base64,");
  });

  test("replicate: /v1/models/{owner}/{name}/predictions with {input}, Bearer, Prefer: wait; polls urls.get through starting/processing", async () => {
    const { fake, engine, job } = build("replicate", { params: `{ go_fast = true, output_format = "png" }` });
    fake.setPendingPolls(3);
    const img = await engine.generate(job({ size: { width: 64, height: 36 } }));
    const [submit] = fake.submits();
    expect(submit!.path).toBe("/v1/models/black-forest-labs/flux-schnell/predictions");
    expect(submit!.authorization).toMatch(/^Bearer queue-key-/);
    expect(submit!.prefer).toMatch(/^wait=\d+$/);
    expect(submit!.json).toEqual({ input: { go_fast: true, output_format: "png", prompt: "a red fox", aspect_ratio: "16:9", width: 64, height: 36 } });
    expect(fake.received.filter((r) => r.method === "GET" && r.path.startsWith("/v1/predictions/")).length).toBe(3); // processing, processing, succeeded
    expect(readPng(img.bytes)).toMatchObject({ width: 64, height: 36 });
  });

  test("replicate: a prediction finished within Prefer: wait is downloaded without polling", async () => {
    const { fake, engine, job } = build("replicate");
    fake.setPendingPolls(0);
    const img = await engine.generate(job());
    expect(fake.received.filter((r) => r.method === "GET" && r.path.startsWith("/v1/predictions/"))).toHaveLength(0);
    expect(readPng(img.bytes)).toMatchObject({ width: 48, height: 32 });
  });

  test("replicate: a prediction finished within Prefer: wait may answer its output as a data: URI; that is the image (no download, no second job)", async () => {
    const { fake, engine, job } = build("replicate");
    fake.setPendingPolls(0);
    fake.setSyncDataUris(true);
    const img = await engine.generate(job());
    expect(readPng(img.bytes)).toMatchObject({ width: 48, height: 32 });
    expect(img.trace!.attempts).toBe(1);
    expect(fake.submits()).toHaveLength(1);
    expect(fake.received.filter((r) => r.method === "GET")).toHaveLength(0);
  });

  test("replicate: a data: URI output larger than max_download_bytes is refused like a download that large", async () => {
    const { fake, engine, job } = build("replicate", { extra: "max_download_bytes = 1024" });
    fake.setPendingPolls(0);
    fake.setSyncDataUris(true);
    const err = await engine.generate(job({ size: { width: 1000, height: 1000 } })).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    expect(err.message).toMatch(/exceeds the limit of 1024/);
  });

  test("replicate: an attempt that ends while Prefer: wait holds the submit open ends at once, and the prediction is canceled once the answer names it", async () => {
    const { fake, engine, job } = build("replicate", { accounts: `{ id = "a", api_key = "${KEY_A}" }` });
    fake.queueEnds("never");
    fake.setSubmitHoldMs(400);
    const ac = new AbortController();
    const pending = engine.generate(job({ signal: ac.signal })).catch((e) => e);
    await until(() => fake.submits().length === 1, "the submit");
    ac.abort();
    expect(await pending).toBeInstanceOf(EngineTimeout);
    // The attempt did not wait for the held submit; its id was not known yet, so nothing was canceled.
    expect(fake.answeredSubmits).toBe(0);
    expect(fake.cancels).toEqual([]);
    await until(() => fake.cancels.length > 0, "the prediction's cancel once the held submit answered");
    expect(fake.cancels).toEqual(["job1"]);
    expect(fake.received.find((r) => r.path.endsWith("/cancel"))!.account).toBe(KEY_A);
    expect(fake.submits()).toHaveLength(1);
  });

  test("replicate: a held submit that answers a finished prediction after the attempt ended is not canceled", async () => {
    const { fake, engine, job } = build("replicate", { accounts: `{ id = "a", api_key = "${KEY_A}" }` });
    fake.setPendingPolls(0);
    fake.setSubmitHoldMs(200);
    const ac = new AbortController();
    const pending = engine.generate(job({ signal: ac.signal })).catch((e) => e);
    await until(() => fake.submits().length === 1, "the submit");
    ac.abort();
    expect(await pending).toBeInstanceOf(EngineTimeout);
    await until(() => fake.answeredSubmits === 1, "the held submit's answer");
    await Bun.sleep(50);
    expect(fake.cancels).toEqual([]);
  });

  test("replicate: a version goes to /v1/predictions; references as image_input, a custom ratio as custom", async () => {
    const version = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa";
    const { fake, engine, job } = build("replicate", { model: `stability-ai/sdxl:${version}` });
    await engine.generate(job({ images: [input(10, 10)], size: { width: 50, height: 30 } }));
    const json = fake.submits()[0]!.json!;
    expect(fake.submits()[0]!.path).toBe("/v1/predictions");
    expect(json.version).toBe(version);
    expect(json.input).toMatchObject({ aspect_ratio: "custom", width: 50, height: 30 });
    expect((json.input as { image_input: string[] }).image_input[0]).toStartWith("data:image/png;base64,");
  });

  test("bfl: POST /v1/{model} with x-key and width/height; polling_url polled until Ready; result.sample downloaded", async () => {
    const { fake, engine, job } = build("bfl", { params: `{ safety_tolerance = 2, output_format = "png" }` });
    fake.setPendingPolls(3);
    const img = await engine.generate(job());
    const [submit] = fake.submits();
    expect(submit!.path).toBe("/v1/flux-pro-1.1");
    expect(submit!.xKey).toMatch(/^queue-key-/);
    expect(submit!.authorization).toBeNull();
    expect(submit!.json).toEqual({ safety_tolerance: 2, output_format: "png", prompt: "a red fox", width: 48, height: 32 });
    expect(fake.received.filter((r) => r.path.startsWith("/v1/get_result")).length).toBe(4);
    expect(readPng(img.bytes)).toMatchObject({ width: 48, height: 32 });
  });

  test("bfl: Kontext gets aspect_ratio and input_image; a fill model gets image and mask; other models refuse a mask before the charge", async () => {
    const kontext = build("bfl", { model: "flux-kontext-pro" });
    await kontext.engine.edit(kontext.job({ images: [input(12, 12), input(8, 8)], size: { width: 1024, height: 768 } }));
    const k = kontext.fake.submits()[0]!.json!;
    expect(k).toMatchObject({ aspect_ratio: "4:3" });
    expect(k).not.toHaveProperty("width");
    expect(typeof k.input_image).toBe("string");
    expect(typeof k.input_image_2).toBe("string");
    expect(kontext.engine.inputProblem!({ ...kontext.job({ images: [input(8, 8)], mask: input(8, 8, true) }) }, "edit")).toMatchObject({ image: "mask" });

    const fill = build("bfl", { model: "flux-pro-1.0-fill" });
    fill.fake.reset();
    await fill.engine.edit(fill.job({ images: [input(16, 16)], mask: input(16, 16, true) }));
    const f = fill.fake.submits()[0]!.json!;
    expect(f.image).toBe(Buffer.from(input(16, 16).bytes).toString("base64"));
    expect(typeof f.mask).toBe("string");
  });
});

describe.each(KINDS)("%s: outcomes", (kind) => {
  test("the answer is our bytes: no provider URL reaches it", async () => {
    const { fake, engine, job } = build(kind);
    const img = await engine.generate(job());
    expect(JSON.stringify({ ...img, bytes: undefined })).not.toContain(fake.url);
    expect(img.mime).toBe("image/png");
  });

  test("a failed job is a failed attempt, retried on the other account", async () => {
    const { fake, engine, job } = build(kind);
    fake.queueEnds("failed");
    const img = await engine.generate(job());
    expect(img.trace!.attempts).toBe(2);
    expect(new Set(fake.submits().map((r) => r.account)).size).toBe(2);
  });

  if (kind !== "bfl") {
    test("a job canceled on the provider's side is a failed attempt, retried", async () => {
      const { fake, engine, job } = build(kind);
      fake.queueEnds("canceled");
      const img = await engine.generate(job());
      expect(img.trace!.attempts).toBe(2);
    });
  }

  test("a 4xx on submit is a refusal: UpstreamRejected (400 upstream_rejected), no retry", async () => {
    const { fake, engine, job } = build(kind);
    fake.queueSubmitFaults(KEY_A, { status: 422 });
    fake.queueSubmitFaults(KEY_B, { status: 422 });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(apiErrorOf(err)).toMatchObject({ status: 400, errorCode: "upstream_rejected" });
    expect(fake.submits()).toHaveLength(1);
    expect(err.message).not.toContain(KEY_A);
    expect(err.message).not.toContain(KEY_B);
  });

  test("429 cools the account down (retry hint honoured) and the other account serves", async () => {
    const { fake, engine, job, pool } = build(kind);
    fake.queueSubmitFaults(KEY_A, { status: 429, retryAfterMs: 30_000 });
    fake.queueSubmitFaults(KEY_B, { status: 429, retryAfterMs: 30_000 });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRateLimited);
    expect(pool.snapshot().every((s) => s.state === "cooling")).toBe(true);
  });

  test("401/403 disable the account; the other serves", async () => {
    const { fake, engine, job, store } = build(kind);
    fake.queueSubmitFaults(KEY_A, { status: 401 });
    fake.queueSubmitFaults(KEY_B, { status: 403 });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamUnavailable);
    const disabled = await store.upstreams.disabledAccounts("q");
    expect([...disabled.keys()].sort()).toEqual(["a", "b"]);
  });

  test(kind === "bfl" ? "abort stops polling (BFL has no cancel endpoint)" : "abort while the job runs calls the provider's cancel", async () => {
    const { fake, engine, job } = build(kind, { accounts: `{ id = "a", api_key = "${KEY_A}" }` });
    fake.queueEnds("never");
    const ac = new AbortController();
    const pending = engine.generate(job({ signal: ac.signal })).catch((e) => e);
    await until(() => fake.received.some((r) => r.method === "GET"), "the first status poll");
    ac.abort();
    expect(await pending).toBeInstanceOf(EngineTimeout);
    if (kind === "bfl") {
      await Bun.sleep(50);
      expect(fake.received.some((r) => r.path.includes("cancel"))).toBe(false);
    } else {
      await until(() => fake.cancels.length > 0, "the provider's cancel");
      expect(fake.cancels).toEqual(["job1"]);
      const cancel = fake.received.find((r) => r.path.endsWith("/cancel"))!;
      expect(cancel.method).toBe(kind === "fal" ? "PUT" : "POST");
      expect(cancel.account).toBe(KEY_A);
    }
  });

  test("the attempt timeout ends polling within the deadline and cancels the job", async () => {
    const { fake, engine, job } = build(kind, { timeoutMs: 300, extra: "max_attempts = 1" });
    fake.queueEnds("never");
    const started = Date.now();
    const err = await engine.generate(job()).catch((e) => e);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(err.name).toMatch(/Timeout|UpstreamFailed/);
    if (kind !== "bfl") await until(() => fake.cancels.length > 0, "the provider's cancel");
    expect(fake.cancels.length).toBe(kind === "bfl" ? 0 : 1);
  });
});

/*
 * A status poll that fails says nothing about the job, which the provider still holds (and
 * bills): fal's own client polls again on 429 and 5xx (fal-js libs/client/src/queue.ts
 * QUEUE_STATUS_RETRY_CONFIG), and a second submit on another account would be a second job.
 */
describe.each(KINDS)("%s: status polls that go wrong", (kind) => {
  const polls = (fake: FakeQueue) => fake.received.filter((r) => r.method === "GET" && !r.path.startsWith("/files/"));

  test("a 503, a 502 and a connection reset on status polls are polled again: one job, nothing cancelled", async () => {
    const { fake, engine, job } = build(kind);
    fake.queueReadFaults("status", { status: 503 }, { kind: "reset" }, { status: 502 });
    const img = await engine.generate(job());
    expect(img.trace).toMatchObject({ accountId: expect.any(String), attempts: 1 });
    expect(fake.submits()).toHaveLength(1);
    expect(fake.cancels).toEqual([]);
    // The reads of an undisturbed job (fal: three polls and the result; Replicate: two polls after the submit's answer; BFL: three polls), and the three that failed.
    expect(polls(fake)).toHaveLength({ fal: 4, replicate: 2, bfl: 3 }[kind] + 3);
  });

  test("polls that keep failing end the attempt at the bound: the job is cancelled, the other account serves", async () => {
    const { fake, engine, job } = build(kind);
    fake.queueReadFaults("status", ...Array.from({ length: MAX_POLL_RETRIES + 1 }, () => ({ status: 503 })));
    const img = await engine.generate(job());
    expect(img.trace!.attempts).toBe(2);
    expect(new Set(fake.submits().map((r) => r.account)).size).toBe(2);
    if (kind !== "bfl") await until(() => fake.cancels.length > 0, "the provider's cancel");
    expect(fake.cancels).toEqual(kind === "bfl" ? [] : ["job1"]);
  });

  test("a malformed status answer ends the attempt and cancels the job (not only an abort does)", async () => {
    const { fake, engine, job } = build(kind);
    fake.queueReadFaults("status", { status: 200, body: "<html>upstream proxy</html>" });
    const img = await engine.generate(job());
    expect(img.trace!.attempts).toBe(2);
    if (kind !== "bfl") await until(() => fake.cancels.length > 0, "the provider's cancel");
    expect(fake.cancels).toEqual(kind === "bfl" ? [] : ["job1"]);
  });

  test("a 429 on a status poll waits its Retry-After and polls the same job again", async () => {
    const { fake, engine, job } = build(kind);
    fake.queueReadFaults("status", { status: 429, retryAfter: "1" });
    const started = Date.now();
    const img = await engine.generate(job());
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    expect(img.trace!.attempts).toBe(1);
    expect(fake.submits()).toHaveLength(1);
    expect(fake.cancels).toEqual([]);
  });

  test("a 429 whose Retry-After is past the attempt's deadline ends the attempt at once and cancels the job", async () => {
    const { fake, engine, job, pool } = build(kind);
    fake.queueReadFaults("status", { status: 429, retryAfter: "30" });
    const started = Date.now();
    const img = await engine.generate(job());
    expect(Date.now() - started).toBeLessThan(2000);
    expect(img.trace!.attempts).toBe(2);
    expect(pool.snapshot().filter((s) => s.state === "cooling")).toHaveLength(1);
    if (kind !== "bfl") await until(() => fake.cancels.length > 0, "the provider's cancel");
    expect(fake.cancels).toEqual(kind === "bfl" ? [] : ["job1"]);
  });
});

test("fal: a 503 on the result fetch is fetched again: the job is done (and billed), nothing is resubmitted", async () => {
  const { fake, engine, job } = build("fal");
  fake.queueReadFaults("result", { status: 503 }, { kind: "reset" });
  const img = await engine.generate(job());
  expect(img.trace!.attempts).toBe(1);
  expect(fake.submits()).toHaveLength(1);
  expect(fake.received.filter((r) => /\/requests\/job1$/.test(r.path))).toHaveLength(3);
});

/*
 * A moderated job: BFL says so in its status ("Content Moderated"); fal's job is COMPLETED and
 * its result fetch answers 422 content_policy_violation, "Retryable: false" (docs.fal.ai/errors);
 * Replicate's prediction fails with the safety checker's "NSFW content detected" (its only
 * signal). Another account would refuse it too, and the account did nothing wrong.
 */
describe.each(["bfl", "fal", "replicate"] as const)("%s: a moderated job", (kind) => {
  test("is a refusal (400 upstream_rejected), one job, no failure counted against the account", async () => {
    const { fake, engine, job, pool } = build(kind);
    fake.queueEnds("moderated", "moderated");
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(apiErrorOf(err)).toMatchObject({ status: 400, errorCode: "upstream_rejected" });
    expect(err.message).toMatch({ fal: /content_policy_violation/, bfl: /Content Moderated/, replicate: /NSFW content detected/ }[kind]);
    expect(fake.submits()).toHaveLength(1);
    expect(pool.snapshot().map((s) => [s.state, s.consecutiveFailures])).toEqual([
      ["healthy", 0],
      ["healthy", 0],
    ]);
    if (kind === "fal") expect(fake.received.filter((r) => r.path === "/fal-ai/flux/requests/job1")).toHaveLength(1);
    expect(fake.cancels).toEqual([]);
  });
});

describe("status URLs get our credentials only on the upstream's own site", () => {
  test("its base_url's host, with the same protocol", () => {
    expect(onUpstreamSite("https://queue.fal.run/x/requests/1/status", "https://queue.fal.run")).toBe(true);
    expect(onUpstreamSite("https://evil.example/x", "https://queue.fal.run")).toBe(false);
    expect(onUpstreamSite("http://queue.fal.run/x", "https://queue.fal.run")).toBe(false);
    expect(onUpstreamSite("http://127.0.0.2:80/x", "http://127.0.0.1:80")).toBe(false);
  });

  test("no sibling host unless the translator names its domain: a multi-tenant suffix is not one site", () => {
    expect(onUpstreamSite("https://other-tenant.herokuapp.com/status", "https://our-proxy.herokuapp.com")).toBe(false);
    expect(onUpstreamSite("https://evil.co.uk/status", "https://api.gateway.co.uk")).toBe(false);
    expect(onUpstreamSite("https://fal.run/x", "https://queue.fal.run")).toBe(false);
    expect(onUpstreamSite("https://api.eu1.bfl.ai/v1/get_result?id=1", "https://api.bfl.ai")).toBe(false);
  });

  test("BFL names bfl.ai: its regional polling hosts get the key when base_url is on bfl.ai too", () => {
    const domain = new BflTranslator().siblingDomain;
    expect(domain).toBe("bfl.ai");
    const others: QueueTranslator[] = [new FalTranslator(), new ReplicateTranslator()];
    expect(others.map((t) => t.siblingDomain)).toEqual([undefined, undefined]);
    expect(onUpstreamSite("https://api.eu1.bfl.ai/v1/get_result?id=1", "https://api.bfl.ai", domain)).toBe(true);
    expect(onUpstreamSite("https://api.us1.bfl.ai/v1/get_result?id=1", "https://api.eu.bfl.ai", domain)).toBe(true);
    expect(onUpstreamSite("https://evilbfl.ai/x", "https://api.bfl.ai", domain)).toBe(false);
    expect(onUpstreamSite("http://api.eu1.bfl.ai/x", "https://api.bfl.ai", domain)).toBe(false);
    // A base_url elsewhere (a proxy) keeps its key to itself.
    expect(onUpstreamSite("https://api.eu1.bfl.ai/x", "https://bfl-proxy.example", domain)).toBe(false);
  });
});

test("chat models on a queue upstream are refused at startup", () => {
  expect(() =>
    configFromToml(`
[[upstreams]]
id = "q"
kind = "fal"
base_url = "https://queue.fal.run"
accounts = [ { id = "a", api_key = "k" } ]

[[models]]
id = "talk"
kind = "chat"
upstream = "q"
`),
  ).toThrow(/image models only/);
});
