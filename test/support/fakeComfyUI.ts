/**
 * A fake ComfyUI server for the `comfyui` engine tests: a real Bun.serve server on loopback that
 * speaks ComfyUI's HTTP and websocket API, records every request, and checks what it is sent.
 * (Kept apart from fakeUpstreams.ts because it needs its own server: it upgrades /ws.)
 *
 * Followed: ComfyUI's server.py routes and execution.py messages (comfyanonymous/ComfyUI;
 * docs.comfy.org "Routes" and "Messages"; the repository's script_examples/websockets_api_example.py):
 * - POST /prompt {prompt, client_id} → {prompt_id, number, node_errors: {}}; a workflow that
 *   fails validation → 400 {error: {type: "prompt_outputs_failed_validation", message, details},
 *   node_errors: {id: {errors: [{type, message, details}], dependent_outputs, class_type}}};
 * - GET /ws?clientId=… upgrades to a websocket; the prompt's client gets {type, data} frames:
 *   `execution_start`, `executing` {node, prompt_id} (node null at the end), `progress`
 *   {value, max, prompt_id, node}, `executed`, `execution_success`, `execution_error`
 *   {prompt_id, node_id, node_type, exception_type, exception_message}; previews as binary
 *   frames: uint32 big-endian 1 (PREVIEW_IMAGE), uint32 image type (2 = PNG), the image;
 * - GET /history/{prompt_id} → {} until done, then {id: {prompt, outputs: {node: {images:
 *   [{filename, subfolder, type}]}}, status: {status_str, completed, messages}}};
 * - GET /view?filename&subfolder&type → the file;
 * - POST /upload/image (multipart image, type, overwrite) → {name, subfolder, type};
 *   POST /upload/mask (image, original_ref JSON) copies the mask's alpha into the original;
 * - GET /queue → {queue_running: [[number, prompt_id, prompt, extra, outputs]], queue_pending: […]};
 *   POST /queue {delete: [ids]} removes pending prompts; POST /interrupt {prompt_id} stops the running one.
 *
 * What it checks: a client_id string, every node with class_type and inputs, no `{{` left in
 * any string input, and every LoadImage `image` naming an uploaded file (else node_errors, as
 * ComfyUI's own validation answers).
 */
import type { Server, ServerWebSocket } from "bun";
import type { Fault, Received } from "./fakeUpstreams";
import { makePng } from "./images";

export type ComfyFault = Fault | { kind: "node-errors" } | { kind: "execution-error"; message: string };

export interface ComfyPrompt {
  promptId: string;
  clientId: string;
  account: string;
  workflow: Record<string, { class_type: string; inputs: Record<string, unknown> }>;
  state: "pending" | "running" | "done" | "deleted" | "interrupted";
  fail?: string;
}

export interface FakeComfyUI {
  url: string;
  received: Received[];
  prompts: ComfyPrompt[];
  /** Uploaded files by name (upload/mask stores the mask as sent, with the original it names). */
  uploads: Map<string, { bytes: Uint8Array; originalRef?: unknown; kind: "image" | "mask" }>;
  sockets: { clientId: string; account: string }[];
  historyPolls: number;
  /** The next /prompt requests of `account` get these faults, in order. */
  queueFaults(account: string, ...faults: ComfyFault[]): void;
  /** false: /ws answers 503 (clients must poll /history). */
  setWebSocket(on: boolean): void;
  /** Each prompt runs `steps` sampler steps of `stepMs`, sending progress (and a preview with previews on). */
  setSteps(steps: number, stepMs: number, previews?: boolean): void;
  /** true: queued prompts stay pending (nothing runs). */
  setPaused(paused: boolean): void;
  reset(): void;
  stop(): Promise<void>;
}

function accountOf(authorization: string | null): string {
  if (!authorization) return "(none)";
  const bearer = /^Bearer\s+(.+)$/i.exec(authorization);
  if (bearer) return bearer[1]!;
  const basic = /^Basic\s+(.+)$/i.exec(authorization);
  return basic ? Buffer.from(basic[1]!, "base64").toString("utf8").split(":")[0]! : authorization;
}

export function startFakeComfyUI(): FakeComfyUI {
  const received: Received[] = [];
  const prompts: ComfyPrompt[] = [];
  const uploads: FakeComfyUI["uploads"] = new Map();
  const outputs = new Map<string, Uint8Array>();
  const sockets: FakeComfyUI["sockets"] = [];
  const live = new Map<string, ServerWebSocket<{ clientId: string }>>();
  const history = new Map<string, unknown>();
  const queued = new Map<string, ComfyFault[]>();
  let wsOn = true;
  let steps = 3;
  let stepMs = 5;
  let previews = false;
  let paused = false;
  let number = 0;
  let working = false;
  const state = { historyPolls: 0 };

  const send = (p: ComfyPrompt, type: string, data: Record<string, unknown>) => live.get(p.clientId)?.send(JSON.stringify({ type, data: { ...data, prompt_id: p.promptId } }));

  async function work(): Promise<void> {
    if (working) return;
    working = true;
    try {
      for (;;) {
        const p = paused ? undefined : prompts.find((x) => x.state === "pending");
        if (!p) return;
        p.state = "running";
        await run(p);
      }
    } finally {
      working = false;
    }
  }

  async function run(p: ComfyPrompt): Promise<void> {
    send(p, "execution_start", { timestamp: Date.now() });
    const sampler = Object.keys(p.workflow).find((id) => p.workflow[id]!.class_type === "KSampler") ?? "1";
    send(p, "executing", { node: sampler });
    for (let i = 1; i <= steps; i++) {
      await Bun.sleep(stepMs);
      if (p.state === "interrupted") {
        history.set(p.promptId, { prompt: [], outputs: {}, status: { status_str: "error", completed: false, messages: [["execution_interrupted", { prompt_id: p.promptId, node_id: sampler }]] } });
        send(p, "execution_interrupted", { node_id: sampler, node_type: "KSampler", executed: [] });
        return;
      }
      send(p, "progress", { value: i, max: steps, node: sampler });
      if (previews) {
        const png = makePng(8, 8, () => [i * 60, 0, 0, 255]);
        const frame = new Uint8Array(8 + png.byteLength);
        new DataView(frame.buffer).setUint32(0, 1);
        new DataView(frame.buffer).setUint32(4, 2);
        frame.set(png, 8);
        live.get(p.clientId)?.send(frame);
      }
    }
    if (p.fail) {
      const error = { prompt_id: p.promptId, node_id: sampler, node_type: "KSampler", exception_type: "torch.OutOfMemoryError", exception_message: p.fail, traceback: [] };
      history.set(p.promptId, { prompt: [], outputs: {}, status: { status_str: "error", completed: false, messages: [["execution_start", {}], ["execution_error", error]] } });
      send(p, "execution_error", error);
      p.state = "done";
      return;
    }
    const latent = Object.values(p.workflow).find((n) => n.class_type === "EmptyLatentImage")?.inputs;
    const w = Number(latent?.width ?? 64);
    const h = Number(latent?.height ?? 64);
    const filename = `ComfyUI_${p.promptId.slice(0, 8)}_.png`;
    outputs.set(filename, makePng(w, h, (x, y) => [x % 256, y % 256, 7, 255]));
    const save = Object.keys(p.workflow).filter((id) => p.workflow[id]!.class_type === "SaveImage");
    history.set(p.promptId, {
      prompt: [number, p.promptId, p.workflow, {}, save],
      outputs: Object.fromEntries(save.map((id) => [id, { images: [{ filename, subfolder: "", type: "output" }] }])),
      status: { status_str: "success", completed: true, messages: [["execution_start", {}], ["execution_success", {}]] },
    });
    p.state = "done";
    send(p, "executing", { node: null });
    send(p, "execution_success", {});
  }

  function validate(workflow: unknown): Record<string, unknown> | null {
    const errors: Record<string, unknown> = {};
    if (!workflow || typeof workflow !== "object") return { "": { errors: [{ type: "invalid_prompt", message: "Cannot execute because the prompt is not a JSON object" }] } };
    for (const [id, node] of Object.entries(workflow as Record<string, { class_type?: unknown; inputs?: Record<string, unknown> }>)) {
      const problems: { type: string; message: string; details: string }[] = [];
      if (typeof node.class_type !== "string" || !node.inputs) problems.push({ type: "invalid_node", message: "missing class_type or inputs", details: "" });
      for (const [input, value] of Object.entries(node.inputs ?? {})) {
        if (typeof value === "string" && value.includes("{{")) problems.push({ type: "unfilled_placeholder", message: "Placeholder left in input", details: `${input}: ${value}` });
      }
      if (node.class_type === "LoadImage" && !uploads.has(String(node.inputs?.image))) {
        problems.push({ type: "custom_validation_failed", message: "Invalid image file", details: `image - Invalid image file: ${String(node.inputs?.image)}` });
      }
      if (problems.length > 0) errors[id] = { errors: problems, dependent_outputs: [], class_type: node.class_type };
    }
    return Object.keys(errors).length > 0 ? errors : null;
  }

  const server: Server<{ clientId: string }> = Bun.serve<{ clientId: string }>({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 30,
    async fetch(request, srv) {
      const url = new URL(request.url);
      const authorization = request.headers.get("authorization");
      const account = accountOf(authorization);
      const rec: Received = { method: request.method, path: url.pathname + url.search, account, authorization };
      if (url.pathname === "/ws") {
        received.push(rec);
        const clientId = url.searchParams.get("clientId") ?? "";
        if (!wsOn) return new Response("websocket off", { status: 503 });
        sockets.push({ clientId, account });
        return srv.upgrade(request, { data: { clientId } }) ? undefined : new Response("upgrade failed", { status: 400 });
      }
      const type = request.headers.get("content-type") ?? "";
      if (type.includes("multipart/form-data")) {
        const form = await request.formData();
        rec.fields = {};
        rec.files = [];
        for (const [name, value] of form.entries() as Iterable<[string, string | File]>) {
          if (typeof value === "string") (rec.fields[name] ??= []).push(value);
          else rec.files.push({ name, filename: value.name ?? null, type: value.type, bytes: new Uint8Array(await value.arrayBuffer()) });
        }
      } else if (request.method === "POST") {
        rec.json = (await request.json()) as Record<string, unknown>;
      }
      received.push(rec);
      const path = url.pathname;
      if (path === "/prompt" && request.method === "POST") {
        const q = queued.get(account);
        const fault = q && q.length > 0 ? q.shift() : undefined;
        if (fault?.kind === "429") return Response.json({ error: "rate limited" }, { status: 429, headers: fault.retryAfter ? { "retry-after": fault.retryAfter } : {} });
        if (fault?.kind === "status") return Response.json({ error: { message: fault.message ?? `fake error ${fault.status}` } }, { status: fault.status });
        if (typeof rec.json?.client_id !== "string") return Response.json({ error: { type: "invalid_prompt", message: "no client_id" }, node_errors: {} }, { status: 400 });
        const nodeErrors =
          fault?.kind === "node-errors"
            ? { "4": { errors: [{ type: "value_not_in_list", message: "Value not in list", details: "ckpt_name: 'missing.safetensors' not in []" }], dependent_outputs: ["9"], class_type: "CheckpointLoaderSimple" } }
            : validate(rec.json.prompt);
        if (nodeErrors) {
          return Response.json({ error: { type: "prompt_outputs_failed_validation", message: "Prompt outputs failed validation", details: "", extra_info: {} }, node_errors: nodeErrors }, { status: 400 });
        }
        const p: ComfyPrompt = { promptId: crypto.randomUUID(), clientId: rec.json.client_id, account, workflow: rec.json.prompt as ComfyPrompt["workflow"], state: "pending" };
        if (fault?.kind === "execution-error") p.fail = fault.message;
        prompts.push(p);
        void work();
        return Response.json({ prompt_id: p.promptId, number: ++number, node_errors: {} });
      }
      if (path.startsWith("/history/")) {
        state.historyPolls++;
        const id = decodeURIComponent(path.slice("/history/".length));
        const entry = history.get(id);
        return Response.json(entry ? { [id]: entry } : {});
      }
      if (path === "/view") {
        const bytes = outputs.get(url.searchParams.get("filename") ?? "");
        if (!bytes || url.searchParams.get("type") !== "output") return new Response("404: Not Found", { status: 404 });
        return new Response(bytes as Uint8Array<ArrayBuffer>, { headers: { "content-type": "image/png" } });
      }
      if (path === "/upload/image" || path === "/upload/mask") {
        const file = rec.files?.find((f) => f.name === "image");
        if (!file?.filename) return new Response("no image", { status: 400 });
        if (path === "/upload/mask") {
          const originalRef = JSON.parse(rec.fields?.original_ref?.[0] ?? "null") as { filename?: string } | null;
          if (!originalRef?.filename || !uploads.has(originalRef.filename)) return new Response("original not found", { status: 400 });
          uploads.set(file.filename, { bytes: file.bytes, originalRef, kind: "mask" });
        } else uploads.set(file.filename, { bytes: file.bytes, kind: "image" });
        return Response.json({ name: file.filename, subfolder: "", type: rec.fields?.type?.[0] ?? "input" });
      }
      if (path === "/queue") {
        if (request.method === "POST") {
          for (const id of (rec.json?.delete as string[] | undefined) ?? []) {
            const p = prompts.find((x) => x.promptId === id && x.state === "pending");
            if (p) p.state = "deleted";
          }
          return new Response(null, { status: 200 });
        }
        const entry = (p: ComfyPrompt, i: number) => [i, p.promptId, p.workflow, { client_id: p.clientId }, []];
        return Response.json({
          queue_running: prompts.filter((p) => p.state === "running").map(entry),
          queue_pending: prompts.filter((p) => p.state === "pending").map(entry),
        });
      }
      if (path === "/interrupt" && request.method === "POST") {
        const id = rec.json?.prompt_id;
        for (const p of prompts) if (p.state === "running" && (id === undefined || p.promptId === id)) p.state = "interrupted";
        return new Response(null, { status: 200 });
      }
      return new Response("404: Not Found", { status: 404 });
    },
    websocket: {
      open(ws) {
        live.set(ws.data.clientId, ws);
        ws.send(JSON.stringify({ type: "status", data: { status: { exec_info: { queue_remaining: 0 } }, sid: ws.data.clientId } }));
      },
      message() {},
      close(ws) {
        live.delete(ws.data.clientId);
      },
    },
  });

  return {
    url: `http://127.0.0.1:${server.port}`,
    received,
    prompts,
    uploads,
    sockets,
    get historyPolls() {
      return state.historyPolls;
    },
    queueFaults: (account, ...faults) => queued.set(account, [...(queued.get(account) ?? []), ...faults]),
    setWebSocket: (on) => {
      wsOn = on;
    },
    setSteps: (n, ms, withPreviews = false) => {
      steps = n;
      stepMs = ms;
      previews = withPreviews;
    },
    setPaused: (p) => {
      paused = p;
      if (!p) void work();
    },
    reset() {
      received.length = 0;
      for (const p of prompts) if (p.state === "pending" || p.state === "running") p.state = "interrupted";
      prompts.length = 0;
      uploads.clear();
      sockets.length = 0;
      queued.clear();
      history.clear();
      wsOn = true;
      steps = 3;
      stepMs = 5;
      previews = false;
      paused = false;
      state.historyPolls = 0;
    },
    async stop() {
      await server.stop(true);
    },
  };
}
