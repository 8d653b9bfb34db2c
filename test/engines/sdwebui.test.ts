/**
 * The `sdwebui` engine against a fake Stable Diffusion WebUI on loopback: txt2img/img2img,
 * size and quality mapping, per-model params, basic auth, the mask inverted pixel by pixel,
 * progress polling with live previews as partials, faults, and abandoned generations (each
 * attempt's task id; interrupted only when it is the one the WebUI runs).
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { ModelCatalog } from "../../src/core/models";
import { EngineRegistry } from "../../src/engines/registry";
import { QUALITY_STEPS } from "../../src/engines/sdwebui/translate";
import { EngineTimeout, UpstreamRejected, type ImageInput, type ImageJob, type ProgressReport } from "../../src/core/engine";
import { registerUpstreamEngines } from "../../src/engines/upstreams";
import { createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { startFakeWebUI } from "../support/fakeUpstreams";
import { makePng, readPng } from "../support/images";
import { configFromToml } from "../support/server";
import { STOP_ABANDONED_TIMEOUT_MS } from "../../src/engines/sdwebui/abandoned";

const PASSWORD_1 = "webui-secret-password-1";

const fake = startFakeWebUI();
afterAll(() => fake.stop());
beforeEach(() => fake.reset());

function build(timeoutMs = 5000) {
  const config = configFromToml(`
[[upstreams]]
id = "sd"
kind = "sdwebui"
base_url = "${fake.url}/"
# Generous: the fake draws a real 1024x1024 PNG per answer, slow on a loaded 2-core machine.
timeout_ms = ${timeoutMs}
accounts = [
  { id = "gpu1", username = "alice", password = "${PASSWORD_1}", max_concurrency = 1 },
  { id = "gpu2", max_concurrency = 1 },
]

[[models]]
id = "sdxl"
kind = "image"
upstream = "sd"
params = { sampler_name = "DPM++ 2M", cfg_scale = 6.5, checkpoint = "sd_xl_base_1.0.safetensors", negative_prompt = "blurry" }

[[models]]
id = "sd15"
kind = "image"
upstream = "sd"
params = { steps = 30, width = 512, height = 640 }
`);
  const store = createStore(openDatabase(":memory:"), latestVersion());
  const registry = new EngineRegistry();
  const logs: string[] = [];
  registerUpstreamEngines(config, registry, { store: store.upstreams, clock: Date.now, logger: createLogger((l) => logs.push(l)), progressPollMs: 10 });
  const catalog = new ModelCatalog(config);
  const sdxl = catalog.get("sdxl")!;
  const engine = registry.imageEngine(sdxl)!;
  const job = (over: Partial<ImageJob> = {}): ImageJob => ({
    model: sdxl,
    prompt: "a castle",
    size: { width: 64, height: 48 },
    quality: "auto",
    images: [],
    extra: {},
    signal: new AbortController().signal,
    ...over,
  });
  return { engine, job, catalog, logs };
}

function png(width: number, height: number, color: (x: number, y: number) => [number, number, number, number]): ImageInput {
  return { bytes: makePng(width, height, color), mime: "image/png", width, height };
}

describe("sdwebui requests", () => {
  test("text only: txt2img with size → width/height, params passed, checkpoint via override_settings, basic auth", async () => {
    const { engine, job } = build();
    const img = await engine.generate(job());
    const r = fake.received[0]!;
    expect(r.path).toBe("/sdapi/v1/txt2img");
    expect(r.json).toMatchObject({
      prompt: "a castle",
      width: 64,
      height: 48,
      steps: QUALITY_STEPS.auto,
      batch_size: 1,
      n_iter: 1,
      sampler_name: "DPM++ 2M",
      cfg_scale: 6.5,
      negative_prompt: "blurry",
      override_settings: { sd_model_checkpoint: "sd_xl_base_1.0.safetensors" },
      override_settings_restore_afterwards: true,
    });
    expect(r.json).not.toHaveProperty("checkpoint");
    expect(r.authorization).toBe(`Basic ${btoa(`alice:${PASSWORD_1}`)}`);
    expect(img).toMatchObject({ mime: "image/png", width: 64, height: 48, revisedPrompt: "a castle", trace: { upstreamId: "sd", accountId: "gpu1", attempts: 1 } });
  });

  test("quality maps to steps: low 15, medium 25, high 40, standard 25, hd 40", async () => {
    const { engine, job } = build();
    for (const quality of ["low", "medium", "high", "standard", "hd"]) await engine.generate(job({ quality }));
    expect(fake.received.map((r) => r.json!.steps)).toEqual([15, 25, 40, 25, 40]);
  });

  test("size auto: the model's params width/height and steps; without them 1024x1024", async () => {
    const { engine, job, catalog } = build();
    await engine.generate(job({ model: catalog.get("sd15")!, size: null }));
    expect(fake.received[0]!.json).toMatchObject({ width: 512, height: 640, steps: 30 });
    await engine.generate(job({ size: null, quality: "high" }));
    expect(fake.received[1]!.json).toMatchObject({ width: 1024, height: 1024, steps: 40 });
  });

  test("reference images: img2img with init_images and denoising strength", async () => {
    const { engine, job } = build();
    const ref = png(40, 40, () => [1, 2, 3, 255]);
    await engine.generate(job({ images: [ref], size: null }));
    const r = fake.received[0]!;
    expect(r.path).toBe("/sdapi/v1/img2img");
    expect(r.json!.init_images).toEqual([Buffer.from(ref.bytes).toString("base64")]);
    expect(r.json).toMatchObject({ width: 40, height: 40, denoising_strength: 0.75 });
    expect(r.json).not.toHaveProperty("mask");
  });

  test("edit with a mask: inpainting; the mask arrives inverted (transparent → white), pixel by pixel", async () => {
    const { engine, job } = build();
    const W = 24;
    const H = 16;
    const base = png(W, H, (x, y) => [x * 8, y * 8, 0, 255]);
    // Transparent left third and a transparent diagonal; alpha 127 counts as transparent, 128 as opaque.
    const alphaAt = (x: number, y: number) => (x < 8 || x === y ? 0 : x === 20 ? 127 : x === 21 ? 128 : 255);
    const mask = png(W, H, (x, y) => [90, 90, 90, alphaAt(x, y)]);
    await engine.edit(job({ images: [base], mask, size: { width: W, height: H } }));
    const r = fake.received[0]!;
    expect(r.path).toBe("/sdapi/v1/img2img");
    expect(r.json).toMatchObject({ inpainting_mask_invert: 0, inpainting_fill: 1 });
    const sent = readPng(Buffer.from(String(r.json!.mask), "base64"));
    expect(sent.width).toBe(W);
    expect(sent.height).toBe(H);
    let checked = 0;
    for (let y = 0; y < H; y++) {
      for (let x = 0; x < W; x++) {
        const i = (y * W + x) * 4;
        const expected = alphaAt(x, y) < 128 ? 255 : 0;
        expect([sent.data[i], sent.data[i + 1], sent.data[i + 2], sent.data[i + 3]]).toEqual([expected, expected, expected, 255]);
        checked++;
      }
    }
    expect(checked).toBe(W * H);
  });
});

describe("sdwebui faults", () => {
  test("500 (e.g. out of GPU memory) on one server: served by the other, without credentials", async () => {
    const { engine, job } = build();
    fake.queueFaults("alice", { kind: "status", status: 500, message: "CUDA out of memory" });
    const img = await engine.generate(job());
    expect(img.trace).toMatchObject({ accountId: "gpu2", attempts: 2 });
    expect(fake.received[1]!.authorization).toBeNull();
  });

  test("422 from the WebUI is a rejection without retry; the password never appears", async () => {
    const { engine, job, logs } = build();
    fake.alwaysFault("alice", { kind: "status", status: 422, message: `invalid sampler (auth alice:${PASSWORD_1})` });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(fake.received).toHaveLength(1);
    expect(err.message).not.toContain(PASSWORD_1);
    expect(logs.join("\n")).not.toContain(PASSWORD_1);
  });

  test("an answer that is not an image is a failure and retried", async () => {
    const { engine, job } = build();
    fake.queueFaults("alice", { kind: "not-image" });
    const img = await engine.generate(job());
    expect(img.trace).toMatchObject({ accountId: "gpu2", attempts: 2 });
  });
});

describe("sdwebui progress", () => {
  const listen = () => {
    const reports: ProgressReport[] = [];
    return { reports, onProgress: (r: ProgressReport) => reports.push(r) };
  };

  test("while a generation runs, /sdapi/v1/progress is polled with the same account; fractions are reported and previews become partials spread over the run", async () => {
    const { engine, job } = build();
    fake.setProgressSteps(4);
    const { reports, onProgress } = listen();
    const img = await engine.generate(job({ partialImages: 2, onProgress }));
    expect(img.width).toBe(64);
    const polls = fake.received.filter((r) => r.path.startsWith("/sdapi/v1/progress"));
    expect(polls.length).toBeGreaterThanOrEqual(4);
    expect(polls[0]!.method).toBe("GET");
    expect(polls[0]!.authorization).toBe(fake.received.find((r) => r.path === "/sdapi/v1/txt2img")!.authorization);
    // Polls see 0.25, 0.5, 0.75, 1: the partials are taken at 1/3 and 2/3 of the way, i.e. at 0.5 and 0.75.
    const partials = reports.filter((r) => r.partial);
    expect(partials.map((r) => r.fraction)).toEqual([0.5, 0.75]);
    for (const p of partials) {
      expect(p.partial).toMatchObject({ mime: "image/png", width: 64, height: 48 });
      expect(readPng(p.partial!.bytes).width).toBe(64);
    }
    expect(reports.map((r) => r.fraction)).toContain(0.25);
    // Once both partials were taken, later polls skip the preview.
    expect(fake.progressPolls.at(-1)!.skipCurrentImage).toBe(true);
    expect(fake.progressPolls[0]!.skipCurrentImage).toBe(false);
  });

  test("a job that listens without partials polls with skip_current_image and reports fractions only; a job that does not listen never polls", async () => {
    const { engine, job } = build();
    fake.setProgressSteps(2);
    const { reports, onProgress } = listen();
    await engine.generate(job({ onProgress }));
    expect(fake.progressPolls.every((p) => p.skipCurrentImage)).toBe(true);
    expect(reports.some((r) => r.partial)).toBe(false);
    expect(reports.length).toBeGreaterThan(0);

    fake.reset();
    await engine.generate(job());
    expect(fake.received.filter((r) => r.path.startsWith("/sdapi/v1/progress"))).toHaveLength(0);
  });

  test("a failing progress poll fails nothing, and polling stops when the generation ends", async () => {
    const { engine, job } = build();
    fake.setProgressSteps(2);
    // Whichever server takes the job: its txt2img goes through, its first two progress polls answer 500.
    for (const account of ["alice", "(none)"]) fake.queueFaults(account, { kind: "delay", ms: 0 }, { kind: "status", status: 500 }, { kind: "status", status: 500 });
    const { reports, onProgress } = listen();
    const img = await engine.generate(job({ partialImages: 1, onProgress }));
    expect(img.trace).toMatchObject({ attempts: 1 });
    expect(fake.received.filter((r) => r.path.startsWith("/sdapi/v1/progress")).length).toBeGreaterThanOrEqual(4);
    expect(reports.filter((r) => r.partial)).toHaveLength(1);
    // A poll already sent when the generation ended is aborted on our side but may still reach
    // the server a moment later (CI saw one land after generate returned): at most that one.
    // Polling on would add about five in 60 ms (every 10 ms).
    const count = fake.received.length;
    await Bun.sleep(60);
    const late = fake.received.length - count;
    expect(late).toBeLessThanOrEqual(1);
    if (late === 1) expect(fake.received.at(-1)!.path.startsWith("/sdapi/v1/progress")).toBe(true);
    await Bun.sleep(60);
    expect(fake.received.length).toBe(count + late);
  });
});

describe("sdwebui abandoned generations", () => {
  const TASK_ID = /^task\(atelier-[0-9A-Za-z]{22}\)$/;
  const waitFor = async (cond: () => boolean, what: string) => {
    for (let i = 0; i < 500 && !cond(); i++) await Bun.sleep(10);
    if (!cond()) throw new Error(`timed out waiting for ${what}`);
  };
  const generations = () => fake.received.filter((r) => r.path === "/sdapi/v1/txt2img" || r.path === "/sdapi/v1/img2img");
  /** Another client of the same WebUI, sending its own generation (no credentials: account "(none)"). */
  const otherClient = (taskId: string) =>
    fetch(`${fake.url}/sdapi/v1/txt2img`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "theirs", width: 8, height: 8, force_task_id: taskId }) });

  test("each attempt sends its own task id in the WebUI's task(…) form; a model's params cannot set it", async () => {
    const { engine, job } = build();
    const sdxl = job().model;
    await engine.generate(job());
    await engine.generate(job({ model: { ...sdxl, params: { ...sdxl.params, force_task_id: "task(fixed)" } } }));
    const ids = generations().map((r) => r.json!.force_task_id);
    expect(ids).toHaveLength(2);
    for (const id of ids) expect(id).toMatch(TASK_ID);
    expect(ids[0]).not.toBe(ids[1]);
    // The rest of the payload is intact beside it.
    expect(generations()[1]!.json).toMatchObject({ prompt: "a castle", width: 64, height: 48, cfg_scale: 6.5 });
    expect(fake.tasks.map((t) => t.id)).toEqual(ids as string[]);
    // Nothing was abandoned: the WebUI was asked nothing more.
    expect(fake.taskQueries).toHaveLength(0);
    expect(fake.interrupts).toHaveLength(0);
  });

  test("abandoned while it runs: our task id is looked up with the attempt's credentials and interrupted, before the engine returns", async () => {
    const { engine, job, logs } = build();
    fake.holdGenerations(true);
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e: unknown) => e);
    await waitFor(() => fake.tasks[0]?.state === "running", "the generation to run");
    abort.abort();
    const err = await running;
    expect(err).toBeInstanceOf(EngineTimeout);
    // Already done when generate settled: the engine counts as stopped only after the interrupt.
    const sent = generations()[0]!;
    const ours = sent.json!.force_task_id as string;
    expect(ours).toMatch(TASK_ID);
    expect(fake.interrupts).toEqual([{ stopped: ours }]);
    expect(fake.tasks[0]).toMatchObject({ id: ours, state: "interrupted" });
    const query = fake.received.find((r) => r.path === "/internal/progress")!;
    expect(query.method).toBe("POST");
    expect(query.json).toEqual({ id_task: ours, id_live_preview: -1, live_preview: false });
    expect(query.authorization).toBe(sent.authorization);
    expect(fake.received.find((r) => r.path === "/sdapi/v1/interrupt")!.authorization).toBe(sent.authorization);
    expect(logs.join("\n")).toContain("abandoned WebUI generation interrupted");
    expect(logs.join("\n")).not.toContain(PASSWORD_1);
  });

  test("an attempt that times out is interrupted before the retry is sent, so the retry does not wait behind it", async () => {
    const { engine, job } = build(400);
    fake.holdGenerations(true);
    const result = engine.generate(job());
    await waitFor(() => fake.tasks[0]?.state === "running", "the first attempt to run");
    fake.holdGenerations(false); // the retry's generation finishes at once
    const img = await result;
    expect(img.trace).toMatchObject({ attempts: 2 });
    const [first, second] = fake.tasks;
    expect(first!.state).toBe("interrupted");
    expect(second!.state).toBe("finished");
    expect(fake.interrupts).toEqual([{ stopped: first!.id }]);
    const order = fake.received.map((r) => r.path).filter((p) => !p.startsWith("/sdapi/v1/progress"));
    expect(order).toEqual(["/sdapi/v1/txt2img", "/internal/progress", "/sdapi/v1/interrupt", "/sdapi/v1/txt2img"]);
  });

  test("queued behind another client's running job: neither is interrupted (ours runs later, as the WebUI does)", async () => {
    const { engine, job, logs } = build();
    fake.holdGenerations(true);
    const theirs = otherClient("task(someone-else)");
    await waitFor(() => fake.tasks[0]?.state === "running", "the other client's job to run");
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e: unknown) => e);
    await waitFor(() => fake.tasks[1]?.state === "queued", "ours to queue");
    abort.abort();
    expect(await running).toBeInstanceOf(EngineTimeout);
    const ours = fake.tasks[1]!.id;
    expect(fake.taskQueries).toEqual([{ idTask: ours, answered: { active: false, queued: true, completed: false } }]);
    expect(fake.interrupts).toHaveLength(0);
    expect(fake.tasks[0]).toMatchObject({ id: "task(someone-else)", state: "running" });
    expect(logs.join("\n")).toContain("left queued");
    // The WebUI runs the abandoned request when its turn comes: nothing takes it out of the queue.
    fake.finishRunning();
    expect((await theirs).status).toBe(200);
    await waitFor(() => fake.tasks[1]!.state === "running", "ours to start after theirs");
    expect(fake.interrupts).toHaveLength(0);
    fake.finishRunning();
  });

  test("a WebUI without /internal/progress (404, as with --nowebui) is never interrupted", async () => {
    const { engine, job, logs } = build();
    fake.holdGenerations(true);
    fake.setTaskProgress(false);
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e: unknown) => e);
    await waitFor(() => fake.tasks[0]?.state === "running", "the generation to run");
    abort.abort();
    expect(await running).toBeInstanceOf(EngineTimeout);
    expect(fake.taskQueries).toHaveLength(1);
    expect(fake.interrupts).toHaveLength(0);
    expect(fake.tasks[0]!.state).toBe("running");
    expect(logs.join("\n")).toContain("its state could not be read");
    expect(logs.join("\n")).toContain("404");
    fake.finishRunning();
  });

  test("a WebUI before 1.8.0 (force_task_id ignored, API jobs not registered): our running job is unknown to it, so nothing is interrupted", async () => {
    const { engine, job } = build();
    fake.holdGenerations(true);
    fake.setApiTaskIds(false);
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e: unknown) => e);
    await waitFor(() => fake.tasks[0]?.state === "running", "the generation to run");
    abort.abort();
    expect(await running).toBeInstanceOf(EngineTimeout);
    expect(fake.taskQueries).toEqual([{ idTask: fake.tasks[0]!.id, answered: { active: false, queued: false, completed: false } }]);
    expect(fake.interrupts).toHaveLength(0);
    fake.finishRunning();
  });

  test("finished on the WebUI but its answer not yet here: not interrupted (the next job may be another client's)", async () => {
    const { engine, job } = build();
    fake.setAnswerDelay(1_000);
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e: unknown) => e);
    await waitFor(() => fake.tasks[0]?.state === "finished", "the generation to finish");
    // Another client's job is what runs now (its own answer not delayed).
    fake.setAnswerDelay(0);
    fake.holdGenerations(true);
    const theirs = otherClient("task(someone-else)");
    await waitFor(() => fake.tasks[1]?.state === "running", "the other client's job to run");
    abort.abort();
    expect(await running).toBeInstanceOf(EngineTimeout);
    expect(fake.taskQueries).toEqual([{ idTask: fake.tasks[0]!.id, answered: { active: false, queued: false, completed: true } }]);
    expect(fake.interrupts).toHaveLength(0);
    expect(fake.tasks[1]!.state).toBe("running");
    fake.finishRunning();
    await theirs;
  });

  test("the look-up failing (500 naming the password) interrupts nothing; the log gives the reason without the password", async () => {
    const { engine, job, logs } = build();
    fake.holdGenerations(true);
    // gpu1 (alice) takes the first request: its generation passes, its look-up fails.
    fake.queueFaults("alice", { kind: "delay", ms: 0 }, { kind: "status", status: 500, message: `internal error (auth alice:${PASSWORD_1})` });
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e: unknown) => e);
    await waitFor(() => fake.tasks[0]?.state === "running", "the generation to run");
    abort.abort();
    expect(await running).toBeInstanceOf(EngineTimeout);
    expect(fake.received.filter((r) => r.path === "/internal/progress")).toHaveLength(1);
    expect(fake.interrupts).toHaveLength(0);
    const log = logs.join("\n");
    expect(log).toContain("its state could not be read");
    expect(log).toContain("500");
    expect(log).not.toContain(PASSWORD_1);
    fake.finishRunning();
  });

  test("a look-up that never answers: the attempt still ends within STOP_ABANDONED_TIMEOUT_MS, nothing interrupted", async () => {
    const { engine, job } = build();
    fake.holdGenerations(true);
    fake.queueFaults("alice", { kind: "delay", ms: 0 }, { kind: "hang" });
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e: unknown) => e);
    await waitFor(() => fake.tasks[0]?.state === "running", "the generation to run");
    const abortedAt = performance.now();
    abort.abort();
    expect(await running).toBeInstanceOf(EngineTimeout);
    const took = performance.now() - abortedAt;
    expect(took).toBeGreaterThanOrEqual(STOP_ABANDONED_TIMEOUT_MS - 50);
    expect(took).toBeLessThan(STOP_ABANDONED_TIMEOUT_MS + 1_500);
    expect(fake.interrupts).toHaveLength(0);
    fake.finishRunning();
  });
});
