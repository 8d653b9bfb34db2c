/**
 * A `comfyui` model's settings ([[models]].params): the workflow in ComfyUI's API format
 * (`params.workflow`, an object, or a JSON file path relative to the config file), how our
 * fields reach it, and which node's output is the image. Checked once at startup (config.ts),
 * so a typo names the model and the node before any request is taken.
 *
 * Our fields reach the workflow in one of two ways, which may be mixed:
 * - placeholders: `{{prompt}}` inside a string input. An input that is exactly one placeholder
 *   takes the typed value (a number for seed, width, height, steps, denoise); a placeholder
 *   inside a longer string is replaced by its text;
 * - explicit bindings: `params.bindings = { seed = "3.seed" }`, i.e. field → `node_id.input`
 *   (the input must exist in that node; its value is replaced).
 * `prompt` must be mapped; `output_node` names the node whose `images` hold the result (default:
 * the workflow's only SaveImage node).
 */
import { isPlainObject } from "../../core/values";

export const COMFY_FIELDS = ["prompt", "negative_prompt", "seed", "width", "height", "steps", "image", "mask", "denoise"] as const;
export type ComfyField = (typeof COMFY_FIELDS)[number];

/** ComfyUI's API format: node id → { class_type, inputs }. */
export type ComfyWorkflow = Record<string, { class_type: string; inputs: Record<string, unknown>; [k: string]: unknown }>;

export interface ComfyBinding {
  field: ComfyField;
  node: string;
  input: string;
}

export interface ComfyModelSettings {
  workflow: ComfyWorkflow;
  bindings: ComfyBinding[];
  outputNode: string;
  /** Every field the workflow takes (by placeholder or binding). */
  uses: Set<ComfyField>;
}

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g;
const isField = (name: string): name is ComfyField => (COMFY_FIELDS as readonly string[]).includes(name);

/**
 * The params with a workflow given as a file path replaced by the file's JSON. `readFile` reads
 * a path already resolved against the config file's folder.
 */
export function withWorkflowLoaded(params: Record<string, unknown>, readFile: (path: string) => string, where: string): Record<string, unknown> {
  if (typeof params.workflow !== "string") return params;
  let text: string;
  try {
    text = readFile(params.workflow);
  } catch (e) {
    throw new Error(`${where}.workflow: cannot read ${JSON.stringify(params.workflow)}: ${(e as Error).message}`);
  }
  try {
    return { ...params, workflow: JSON.parse(text) as unknown };
  } catch (e) {
    throw new Error(`${where}.workflow: ${JSON.stringify(params.workflow)} is not JSON: ${(e as Error).message}`);
  }
}

/** The model's settings, or an Error whose message names the model (`where`), the node and the input. */
export function comfyModelSettings(params: Record<string, unknown>, where: string): ComfyModelSettings {
  const wf = params.workflow;
  if (!isPlainObject(wf) || Object.keys(wf).length === 0) {
    throw new Error(`${where}.workflow: required, a workflow in ComfyUI's API format (an object of nodes, or a JSON file path)`);
  }
  for (const [id, node] of Object.entries(wf)) {
    if (!isPlainObject(node) || typeof node.class_type !== "string" || !isPlainObject(node.inputs)) {
      throw new Error(`${where}.workflow: node ${JSON.stringify(id)} has no class_type and inputs (export the workflow with "Save (API Format)")`);
    }
  }
  const workflow = wf as ComfyWorkflow;
  const uses = new Set<ComfyField>();
  for (const [id, node] of Object.entries(workflow)) {
    for (const [input, value] of Object.entries(node.inputs)) {
      if (typeof value !== "string") continue;
      for (const m of value.matchAll(PLACEHOLDER)) {
        const name = m[1]!;
        if (!isField(name)) throw new Error(`${where}.workflow: node ${JSON.stringify(id)} input ${JSON.stringify(input)}: unknown placeholder {{${name}}} (known: ${COMFY_FIELDS.join(", ")})`);
        uses.add(name);
      }
    }
  }
  const bindings: ComfyBinding[] = [];
  if (params.bindings !== undefined) {
    if (!isPlainObject(params.bindings)) throw new Error(`${where}.bindings: must be a table of field = "node_id.input"`);
    for (const [field, target] of Object.entries(params.bindings)) {
      if (!isField(field)) throw new Error(`${where}.bindings.${field}: unknown field (known: ${COMFY_FIELDS.join(", ")})`);
      const dot = typeof target === "string" ? target.lastIndexOf(".") : -1;
      if (typeof target !== "string" || dot <= 0 || dot === target.length - 1) throw new Error(`${where}.bindings.${field}: must be "node_id.input", got ${JSON.stringify(target)}`);
      const node = target.slice(0, dot);
      const input = target.slice(dot + 1);
      if (!workflow[node]) throw new Error(`${where}.bindings.${field}: the workflow has no node ${JSON.stringify(node)}`);
      if (!(input in workflow[node].inputs)) throw new Error(`${where}.bindings.${field}: node ${JSON.stringify(node)} (${workflow[node].class_type}) has no input ${JSON.stringify(input)}`);
      bindings.push({ field, node, input });
      uses.add(field);
    }
  }
  if (!uses.has("prompt")) throw new Error(`${where}.workflow: takes no prompt: put "{{prompt}}" in a text input or bind it (bindings.prompt = "node_id.text")`);
  let outputNode: string;
  if (params.output_node !== undefined) {
    outputNode = String(params.output_node);
    if (!workflow[outputNode]) throw new Error(`${where}.output_node: the workflow has no node ${JSON.stringify(outputNode)}`);
  } else {
    const saves = Object.entries(workflow).filter(([, n]) => n.class_type === "SaveImage");
    if (saves.length !== 1) throw new Error(`${where}.output_node: required (the workflow has ${saves.length} SaveImage nodes; name the node whose images are the result)`);
    outputNode = saves[0]![0];
  }
  return { workflow, bindings, outputNode, uses };
}

/** The workflow with every placeholder and binding filled from `values` (a deep copy; the model's stays as it is). */
export function filledWorkflow(settings: ComfyModelSettings, values: Partial<Record<ComfyField, string | number>>): ComfyWorkflow {
  const out = structuredClone(settings.workflow);
  for (const node of Object.values(out)) {
    for (const [input, value] of Object.entries(node.inputs)) {
      if (typeof value !== "string" || !value.includes("{{")) continue;
      const whole = /^\{\{\s*([A-Za-z0-9_]+)\s*\}\}$/.exec(value);
      if (whole && values[whole[1] as ComfyField] !== undefined) node.inputs[input] = values[whole[1] as ComfyField];
      else node.inputs[input] = value.replace(PLACEHOLDER, (_, name: string) => String(values[name as ComfyField] ?? ""));
    }
  }
  for (const b of settings.bindings) if (values[b.field] !== undefined) out[b.node]!.inputs[b.input] = values[b.field];
  return out;
}
