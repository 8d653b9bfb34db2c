/**
 * The `comfyui` engine against a fake ComfyUI on loopback (test/support/fakeComfyUI.ts): the
 * workflow filled through placeholders or explicit bindings, uploads and the mask convention,
 * the websocket's progress and previews, history polling without it, startup checks of the
 * bindings, refusals, failures retried on another account, and abandoned prompts removed.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadConfig, type Config } from "../../src/config";
import { ModelCatalog } from "../../src/core/models";
import { UpstreamRejected, type ImageInput, type ImageJob, type ProgressReport } from "../../src/core/engine";
import { EngineRegistry } from "../../src/engines/registry";
import { registerUpstreamEngines } from "../../src/engines/upstreams";
import { createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";
import { startFakeComfyUI } from "../support/fakeComfyUI";
import { makePng, readPng } from "../support/images";
import { startTestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";
import OpenAI, { APIError, toFile } from "openai";

const fake = startFakeComfyUI();
afterAll(() => fake.stop());
beforeEach(() => fake.reset());

/** A text-to-image workflow in ComfyUI's API format, our fields as placeholders. */
const TXT2IMG = {
  "4": { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "sd_xl_base_1.0.safetensors" } },
  "5": { class_type: "EmptyLatentImage", inputs: { width: "{{width}}", height: "{{height}}", batch_size: 1 } },
  "6": { class_type: "CLIPTextEncode", inputs: { text: "{{prompt}}, masterpiece", clip: ["4", 1] } },
  "7": { class_type: "CLIPTextEncode", inputs: { text: "{{negative_prompt}}", clip: ["4", 1] } },
  "3": {
    class_type: "KSampler",
    inputs: { seed: "{{seed}}", steps: "{{steps}}", cfg: 7, sampler_name: "euler", scheduler: "normal", denoise: "{{denoise}}", model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] },
  },
  "8": { class_type: "VAEDecode", inputs: { samples: ["3", 0], vae: ["4", 2] } },
  "9": { class_type: "SaveImage", inputs: { filename_prefix: "atelier", images: ["8", 0] } },
};

/** The same graph without placeholders, for explicit bindings. */
const PLAIN = structuredClone(TXT2IMG) as Record<string, { class_type: string; inputs: Record<string, unknown> }>;
Object.assign(PLAIN["5"]!.inputs, { width: 512, height: 512 });
Object.assign(PLAIN["6"]!.inputs, { text: "" });
Object.assign(PLAIN["7"]!.inputs, { text: "ugly" });
Object.assign(PLAIN["3"]!.inputs, { seed: 0, steps: 20, denoise: 1 });

/** Inpainting: the mask upload (the base image with the mask as its alpha) gives pixels and mask. */
const INPAINT = {
  ...structuredClone(TXT2IMG),
  "10": { class_type: "LoadImage", inputs: { image: "{{mask}}" } },
  "11": { class_type: "VAEEncodeForInpaint", inputs: { pixels: ["10", 0], mask: ["10", 1], vae: ["4", 2], grow_mask_by: 6 } },
};
(INPAINT["3"].inputs as Record<string, unknown>).latent_image = ["11", 0];
delete (INPAINT as Record<string, unknown>)["5"];

/** Image to image: the reference image uploaded and loaded. */
const IMG2IMG = {
  ...structuredClone(TXT2IMG),
  "10": { class_type: "LoadImage", inputs: { image: "{{image}}" } },
  "11": { class_type: "VAEEncode", inputs: { pixels: ["10", 0], vae: ["4", 2] } },
};

/** TOML inline value of a JSON value. */
function toml(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(toml).join(", ")}]`;
  if (v && typeof v === "object") return `{ ${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)} = ${toml(x)}`).join(", ")} }`;
  return JSON.stringify(v);
}

function configWith(models: string, files: Record<string, unknown> = {}): Config {
  const dir = tempDir("atelier-comfy-");
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(join(dir, name, ".."), { recursive: true });
    writeFileSync(join(dir, name), typeof content === "string" ? content : JSON.stringify(content));
  }
  const file = join(dir, "atelier.toml");
  writeFileSync(
    file,
    `
[[upstreams]]
id = "comfy"
kind = "comfyui"
base_url = "${fake.url}"
timeout_ms = 5000
accounts = [ { id = "a", api_key = "key-a", max_concurrency = 1 }, { id = "b", api_key = "key-b", max_concurrency = 1 } ]
${models}`,
  );
  return loadConfig({ file, env: {} });
}

const MODELS = `
[[models]]
id = "sdxl"
kind = "image"
upstream = "comfy"
params = { workflow = "workflows/txt2img.json", negative_prompt = "blurry", seed = 1234 }

[[models]]
id = "bound"
kind = "image"
upstream = "comfy"
params = { workflow = ${toml(PLAIN)}, output_node = "9", bindings = { prompt = "6.text", seed = "3.seed", width = "5.width", height = "5.height", steps = "3.steps" } }

[[models]]
id = "inpaint"
kind = "image"
upstream = "comfy"
params = { workflow = ${toml(INPAINT)}, output_node = 9 }

[[models]]
id = "img2img"
kind = "image"
upstream = "comfy"
params = { workflow = ${toml(IMG2IMG)}, denoise = 0.6 }
`;

function build() {
  const config = configWith(MODELS, { "workflows/txt2img.json": TXT2IMG });
  const store = createStore(openDatabase(":memory:"), latestVersion());
  const registry = new EngineRegistry();
  const logs: string[] = [];
  registerUpstreamEngines(config, registry, { store: store.upstreams, clock: Date.now, logger: createLogger((l) => logs.push(l)), comfyPollMs: 10 });
  const catalog = new ModelCatalog(config);
  const engine = registry.imageEngine(catalog.get("sdxl")!)!;
  const job = (over: Partial<ImageJob> & { modelId?: string } = {}): ImageJob => {
    const { modelId, ...rest } = over;
    return { model: catalog.get(modelId ?? "sdxl")!, prompt: "a castle", size: { width: 64, height: 48 }, quality: "auto", images: [], extra: {}, signal: new AbortController().signal, ...rest };
  };
  return { engine, job, store, logs };
}

function png(width: number, height: number, color: (x: number, y: number) => [number, number, number, number]): ImageInput {
  return { bytes: makePng(width, height, color), mime: "image/png", width, height };
}

type Wf = Record<string, { class_type: string; inputs: Record<string, unknown> }>;
const promptsSent = () => fake.received.filter((r) => r.path === "/prompt");

describe("comfyui requests", () => {
  test("generation: websocket opened with the client_id, the workflow file's placeholders filled with typed values, the output fetched through /view", async () => {
    const { engine, job } = build();
    const reports: ProgressReport[] = [];
    const img = await engine.generate(job({ onProgress: (r) => reports.push(r) }));
    expect(img).toMatchObject({ mime: "image/png", width: 64, height: 48, revisedPrompt: "a castle", trace: { upstreamId: "comfy", accountId: "a", attempts: 1 } });
    const sent = promptsSent()[0]!;
    expect(sent.authorization).toBe("Bearer key-a");
    const clientId = sent.json!.client_id as string;
    expect(fake.sockets).toEqual([{ clientId, account: "key-a" }]);
    const wf = sent.json!.prompt as Wf;
    expect(wf["5"]!.inputs).toEqual({ width: 64, height: 48, batch_size: 1 });
    expect(wf["6"]!.inputs.text).toBe("a castle, masterpiece");
    expect(wf["7"]!.inputs.text).toBe("blurry");
    expect(wf["3"]!.inputs).toMatchObject({ seed: 1234, steps: 25, denoise: 1, cfg: 7, model: ["4", 0] });
    const view = fake.received.find((r) => r.path.startsWith("/view"))!;
    expect(new URLSearchParams(view.path.split("?")[1]).get("type")).toBe("output");
    // The fake runs 3 steps: each progress message is a fraction.
    expect(reports.map((r) => r.fraction)).toEqual([1 / 3, 2 / 3, 1]);
  });

  test("explicit node_id.input bindings replace the inputs they name; the rest of the workflow is sent as written", async () => {
    const { engine, job } = build();
    await engine.generate(job({ modelId: "bound", quality: "high" }));
    const wf = promptsSent()[0]!.json!.prompt as Wf;
    expect(wf["6"]!.inputs.text).toBe("a castle");
    expect(wf["5"]!.inputs).toMatchObject({ width: 64, height: 48 });
    expect(wf["3"]!.inputs).toMatchObject({ steps: 40, denoise: 1 });
    expect(typeof wf["3"]!.inputs.seed).toBe("number");
    expect(wf["7"]!.inputs.text).toBe("ugly");
  });

  test("reference image: uploaded to /upload/image, its stored name fills {{image}}, denoise from params", async () => {
    const { engine, job } = build();
    const ref = png(40, 40, () => [1, 2, 3, 255]);
    await engine.generate(job({ modelId: "img2img", images: [ref] }));
    const upload = fake.received.find((r) => r.path === "/upload/image")!;
    expect(upload.fields).toMatchObject({ type: ["input"], overwrite: ["true"] });
    expect(upload.files![0]!.bytes).toEqual(ref.bytes);
    const wf = promptsSent()[0]!.json!.prompt as Wf;
    expect(wf["10"]!.inputs.image).toBe(upload.files![0]!.filename!);
    expect(wf["3"]!.inputs.denoise).toBe(0.6);
  });

  test("edit with a mask: the base uploaded, then the mask via /upload/mask onto it, hardened to ComfyUI's alpha (0 = repaint), pixel by pixel", async () => {
    const { engine, job } = build();
    const W = 24;
    const H = 16;
    const base = png(W, H, (x, y) => [x * 8, y * 8, 0, 255]);
    const alphaAt = (x: number, y: number) => (x < 8 || x === y ? 0 : x === 20 ? 127 : x === 21 ? 128 : x === 22 ? 200 : 255);
    const mask = png(W, H, (x, y) => [90, 90, 90, alphaAt(x, y)]);
    await engine.edit(job({ modelId: "inpaint", images: [base], mask, size: { width: W, height: H } }));
    const paths = fake.received.map((r) => r.path).filter((p) => p.startsWith("/upload") || p === "/prompt");
    expect(paths).toEqual(["/upload/image", "/upload/mask", "/prompt"]);
    const imageName = fake.received.find((r) => r.path === "/upload/image")!.files![0]!.filename!;
    const maskUpload = fake.received.find((r) => r.path === "/upload/mask")!;
    expect(JSON.parse(maskUpload.fields!.original_ref![0]!)).toEqual({ filename: imageName, subfolder: "", type: "input" });
    const wf = promptsSent()[0]!.json!.prompt as Wf;
    expect(wf["10"]!.inputs.image).toBe(maskUpload.files![0]!.filename!);
    expect(wf["3"]!.inputs.denoise).toBe(0.75);
    const sent = readPng(maskUpload.files![0]!.bytes);
    expect([sent.width, sent.height]).toEqual([W, H]);
    for (let y = 0; y < H; y++) {
      for (let x = 0; x < W; x++) {
        const i = (y * W + x) * 4;
        expect(sent.data[i + 3]).toBe(alphaAt(x, y) < 128 ? 0 : 255);
      }
    }
  });

  test("inputs the workflow cannot take are refused before anything is sent", async () => {
    const { engine, job } = build();
    const ref = png(8, 8, () => [1, 2, 3, 255]);
    expect(await engine.generate(job({ images: [ref] })).catch((e) => e)).toBeInstanceOf(UpstreamRejected);
    expect(await engine.generate(job({ modelId: "img2img" })).catch((e) => e)).toBeInstanceOf(UpstreamRejected);
    expect(fake.received).toHaveLength(0);
    // Before the charge, the images flow asks: an image or a mask the workflow has no place for.
    expect(engine.inputProblem!(job({ images: [ref] }), "generate")).toEqual({ image: 0, message: "model sdxl takes no input image" });
    expect(engine.inputProblem!(job({ modelId: "img2img", images: [ref], mask: ref }), "edit")).toEqual({ image: "mask", message: "model img2img takes no mask" });
    expect(engine.inputProblem!(job({ modelId: "inpaint", images: [ref], mask: ref }), "edit")).toBeNull();
  });
});

describe("comfyui startup checks", () => {
  const model = (params: string) => `
[[models]]
id = "m"
kind = "image"
upstream = "comfy"
params = ${params}
`;
  const error = (params: string, files: Record<string, unknown> = {}) => {
    try {
      configWith(model(params), files);
    } catch (e) {
      return (e as Error).message;
    }
    return "(no error)";
  };
  const withNode6 = (text: string) => toml({ ...TXT2IMG, "6": { class_type: "CLIPTextEncode", inputs: { text, clip: ["4", 1] } } });

  test("a relative workflow path is read from the config file's folder", () => {
    const config = configWith(model(`{ workflow = "wf/a.json" }`), { "wf/a.json": TXT2IMG });
    expect((config.models[0]!.params!.workflow as typeof TXT2IMG)["9"].class_type).toBe("SaveImage");
  });

  test("each mistake names the model, the node and the input", () => {
    expect(error(`{ workflow = "missing.json" }`)).toContain(`models[0] (m): params.workflow: cannot read "missing.json"`);
    expect(error(`{ workflow = "bad.json" }`, { "bad.json": "{ not json" })).toContain("is not JSON");
    expect(error(`{ workflow = ${withNode6("{{promt}}")} }`)).toBe(
      `models[0] (m): params.workflow: node "6" input "text": unknown placeholder {{promt}} (known: prompt, negative_prompt, seed, width, height, steps, image, mask, denoise)`,
    );
    expect(error(`{ workflow = ${toml(PLAIN)}, output_node = "9", bindings = { prompt = "66.text" } }`)).toBe(`models[0] (m): params.bindings.prompt: the workflow has no node "66"`);
    expect(error(`{ workflow = ${toml(PLAIN)}, output_node = "9", bindings = { prompt = "6.txt" } }`)).toBe(`models[0] (m): params.bindings.prompt: node "6" (CLIPTextEncode) has no input "txt"`);
    expect(error(`{ workflow = ${toml(PLAIN)}, bindings = { prompt = "6" } }`)).toContain(`params.bindings.prompt: must be "node_id.input"`);
    expect(error(`{ workflow = ${toml(PLAIN)}, bindings = { colour = "6.text" } }`)).toContain("params.bindings.colour: unknown field");
    expect(error(`{ workflow = ${toml(PLAIN)}, output_node = "9" }`)).toContain("models[0] (m): params.workflow: takes no prompt");
    expect(error(`{ workflow = ${toml(TXT2IMG)}, output_node = "99" }`)).toBe(`models[0] (m): params.output_node: the workflow has no node "99"`);
    expect(error(`{ workflow = ${toml({ ...TXT2IMG, "12": { class_type: "SaveImage", inputs: {} } })} }`)).toContain("params.output_node: required (the workflow has 2 SaveImage nodes");
    expect(error(`{ workflow = { "1" = { inputs = {} } } }`)).toContain(`node "1" has no class_type and inputs`);
    expect(error(`{ negative_prompt = "x" }`)).toContain("params.workflow: required");
  });

  test("a chat model cannot name a ComfyUI upstream", () => {
    expect(() => configWith(`\n[[models]]\nid = "c"\nkind = "chat"\nupstream = "comfy"\n`)).toThrow("serves image models only");
  });
});

describe("comfyui faults", () => {
  test("node_errors: UpstreamRejected with the node and its message, no retry", async () => {
    const { engine, job } = build();
    fake.queueFaults("key-a", { kind: "node-errors" });
    const err = await engine.generate(job()).catch((e) => e);
    expect(err).toBeInstanceOf(UpstreamRejected);
    expect(err.message).toContain("Prompt outputs failed validation");
    expect(err.message).toContain(`node 4 (CheckpointLoaderSimple): Value not in list: ckpt_name: 'missing.safetensors' not in []`);
    expect(promptsSent()).toHaveLength(1);
  });

  test("an execution error (out of memory) is a failed attempt, retried on the other account", async () => {
    const { engine, job, store } = build();
    fake.queueFaults("key-a", { kind: "execution-error", message: "Allocation on device 0 would exceed allowed memory" });
    const img = await engine.generate(job());
    expect(img.trace).toMatchObject({ accountId: "b", attempts: 2 });
    expect(promptsSent().map((r) => r.account)).toEqual(["key-a", "key-b"]);
    expect((await store.upstreams.disabledAccounts("comfy")).size).toBe(0);
  });

  test("an execution error seen only in the history (no websocket) fails the attempt the same way", async () => {
    const { engine, job } = build();
    fake.setWebSocket(false);
    fake.queueFaults("key-a", { kind: "execution-error", message: "CUDA out of memory" });
    const img = await engine.generate(job());
    expect(img.trace).toMatchObject({ accountId: "b", attempts: 2 });
  });

  test("429 cools the account down and 401 disables it; the other account serves each time", async () => {
    const limited = build();
    fake.queueFaults("key-a", { kind: "429", retryAfter: "30" });
    expect((await limited.engine.generate(limited.job())).trace).toMatchObject({ accountId: "b", attempts: 2 });
    expect((await limited.engine.generate(limited.job())).trace).toMatchObject({ accountId: "b", attempts: 1 });

    const refused = build();
    fake.queueFaults("key-a", { kind: "status", status: 401, message: "bad token" });
    expect((await refused.engine.generate(refused.job())).trace).toMatchObject({ accountId: "b", attempts: 2 });
    expect([...(await refused.store.upstreams.disabledAccounts("comfy")).keys()]).toEqual(["a"]);
    expect(refused.logs.some((l) => l.includes("disabled") && l.includes('"account":"a"'))).toBe(true);
  });
});

describe("comfyui progress and fallbacks", () => {
  test("websocket previews become partials, spread over the run", async () => {
    const { engine, job } = build();
    fake.setSteps(4, 5, true);
    const reports: ProgressReport[] = [];
    await engine.generate(job({ partialImages: 1, onProgress: (r) => reports.push(r) }));
    const partials = reports.filter((r) => r.partial);
    expect(partials).toHaveLength(1);
    expect(partials[0]).toMatchObject({ fraction: 0.5, partial: { mime: "image/png", width: 8, height: 8 } });
  });

  test("websocket refused: the history is polled until the image is there", async () => {
    const { engine, job } = build();
    fake.setWebSocket(false);
    fake.setSteps(5, 10);
    const img = await engine.generate(job());
    expect(img.width).toBe(64);
    expect(fake.sockets).toHaveLength(0);
    expect(fake.historyPolls).toBeGreaterThanOrEqual(2);
  });
});

describe("comfyui abandoned prompts", () => {
  const waitFor = async (cond: () => boolean) => {
    for (let i = 0; i < 200 && !cond(); i++) await Bun.sleep(10);
    expect(cond()).toBe(true);
  };

  test("cancelled while queued: the prompt is deleted from the queue, nothing interrupted", async () => {
    const { engine, job } = build();
    fake.setPaused(true);
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e) => e);
    await waitFor(() => fake.prompts.length === 1);
    abort.abort();
    await running;
    await waitFor(() => fake.prompts[0]!.state === "deleted");
    const del = fake.received.find((r) => r.path === "/queue" && r.method === "POST")!;
    expect(del.json).toEqual({ delete: [fake.prompts[0]!.promptId] });
    expect(fake.received.some((r) => r.path === "/interrupt")).toBe(false);
  });

  test("cancelled while running: POST /interrupt names our prompt", async () => {
    const { engine, job } = build();
    fake.setSteps(200, 10);
    const abort = new AbortController();
    const running = engine.generate(job({ signal: abort.signal })).catch((e) => e);
    await waitFor(() => fake.prompts[0]?.state === "running");
    abort.abort();
    await running;
    await waitFor(() => fake.prompts[0]!.state === "interrupted");
    expect(fake.received.find((r) => r.path === "/interrupt")!.json).toEqual({ prompt_id: fake.prompts[0]!.promptId });
  });
});

describe("through a real server with the official openai client", () => {
  test("generation and an edit with a mask (charged), node_errors (400 upstream_rejected, refunded)", async () => {
    const server = await startTestServer({
      toml: `
[[upstreams]]
id = "comfy"
kind = "comfyui"
base_url = "${fake.url}"
accounts = [ { id = "a", api_key = "key-a" } ]

[[models]]
id = "sdxl"
kind = "image"
upstream = "comfy"
params = { workflow = ${toml(TXT2IMG)} }

[[models]]
id = "inpaint"
kind = "image"
upstream = "comfy"
params = { workflow = ${toml(INPAINT)}, output_node = "9" }
`,
    });
    try {
      const { userId, key } = await server.userWithKey({ credits: 10 });
      const oa = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
      const gen = await oa.images.generate({ model: "sdxl", prompt: "a lighthouse", size: "1024x1536" });
      expect(readPng(Buffer.from(gen.data![0]!.b64_json!, "base64"))).toMatchObject({ width: 1024, height: 1536 });
      expect(await server.balance(userId)).toBe(9);

      const base = makePng(32, 32, () => [200, 100, 50, 255]);
      const edit = await oa.images.edit({
        model: "inpaint",
        prompt: "a door",
        image: await toFile(base, "base.png", { type: "image/png" }),
        mask: await toFile(makePng(32, 32, (x) => [0, 0, 0, x < 16 ? 0 : 255]), "mask.png", { type: "image/png" }),
      });
      expect(edit.data![0]!.b64_json).toBeTruthy();
      expect(fake.received.filter((r) => r.path.startsWith("/upload/")).map((r) => r.path)).toEqual(["/upload/image", "/upload/mask"]);
      expect(await server.balance(userId)).toBe(8);

      fake.queueFaults("key-a", { kind: "node-errors" });
      const refused = await oa.images.generate({ model: "sdxl", prompt: "x", size: "1024x1024" }).catch((e) => e);
      expect(refused).toBeInstanceOf(APIError);
      expect(refused.status).toBe(400);
      expect(refused.code).toBe("upstream_rejected");
      expect(refused.message).toContain("CheckpointLoaderSimple");
      expect(await server.balance(userId)).toBe(8);
    } finally {
      await server.stop();
    }
  });
});
