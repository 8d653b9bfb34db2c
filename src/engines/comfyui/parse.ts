/**
 * ComfyUI's answers read back (server.py and execution.py):
 * - POST /prompt → `{prompt_id, number, node_errors}`; a refused workflow answers 400
 *   `{error: {type, message, details}, node_errors: {id: {class_type, errors: [{message, details}]}}}`;
 * - GET /history/{id} → `{}` until done, then `{id: {outputs: {node: {images: [{filename,
 *   subfolder, type}]}}, status: {status_str, completed, messages: [[event, data], …]}}}`;
 * - /upload/image and /upload/mask → `{name, subfolder, type}`;
 * - websocket text frames `{type, data}`: `progress` {value, max, prompt_id}, `executing`
 *   {node, prompt_id} (node null: the prompt is done), `execution_success`, `execution_error`
 *   {exception_type, exception_message, node_id, node_type}, `execution_interrupted`; binary
 *   frames: a 4-byte big-endian event type (1 = preview image), a 4-byte image type (1 JPEG,
 *   2 PNG), then the image.
 */
import { AttemptFailure } from "../pool";
import { isPlainObject } from "../../core/values";

export interface ComfyFileRef {
  filename: string;
  subfolder: string;
  type: string;
}

/** The message of a refused POST /prompt: the error and each failing node with its class and message. */
export function rejectionFromPromptAnswer(text: string): string {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return text.trim() || "ComfyUI refused the workflow";
  }
  if (!isPlainObject(body)) return "ComfyUI refused the workflow";
  const parts: string[] = [];
  const err = body.error;
  if (isPlainObject(err) && typeof err.message === "string") parts.push(err.message + (typeof err.details === "string" && err.details ? ` (${err.details})` : ""));
  else if (typeof err === "string") parts.push(err);
  if (isPlainObject(body.node_errors)) {
    for (const [id, node] of Object.entries(body.node_errors)) {
      if (!isPlainObject(node)) continue;
      const errors = Array.isArray(node.errors) ? node.errors.filter(isPlainObject) : [];
      const what = errors.map((e) => [e.message, e.details].filter((s) => typeof s === "string" && s !== "").join(": ")).join("; ");
      parts.push(`node ${id}${typeof node.class_type === "string" ? ` (${node.class_type})` : ""}: ${what || "invalid"}`);
    }
  }
  return parts.join(": ") || "ComfyUI refused the workflow";
}

/** The prompt_id of a POST /prompt answer; node_errors in a 200 answer are a refusal too. */
export function promptIdFrom(answer: unknown): string {
  if (isPlainObject(answer) && isPlainObject(answer.node_errors) && Object.keys(answer.node_errors).length > 0) {
    throw new AttemptFailure("rejected", rejectionFromPromptAnswer(JSON.stringify(answer)), undefined, 400);
  }
  if (!isPlainObject(answer) || typeof answer.prompt_id !== "string" || answer.prompt_id === "") throw new AttemptFailure("failed", "ComfyUI's /prompt answer has no prompt_id");
  return answer.prompt_id;
}

/** Where an upload was stored, as LoadImage names it (`subfolder/name`) and as a file reference. */
export function uploadedFrom(answer: unknown): { loadName: string; ref: ComfyFileRef } {
  if (!isPlainObject(answer) || typeof answer.name !== "string") throw new AttemptFailure("failed", "ComfyUI's upload answer has no name");
  const subfolder = typeof answer.subfolder === "string" ? answer.subfolder : "";
  const type = typeof answer.type === "string" ? answer.type : "input";
  return { loadName: subfolder ? `${subfolder}/${answer.name}` : answer.name, ref: { filename: answer.name, subfolder, type } };
}

export type HistoryOutcome = { state: "pending" } | { state: "done"; image: ComfyFileRef } | { state: "error"; message: string };

/** What the history says about our prompt: not there yet, failed (with ComfyUI's message), or the output node's first image. */
export function historyOutcome(answer: unknown, promptId: string, outputNode: string): HistoryOutcome {
  const entry = isPlainObject(answer) ? answer[promptId] : undefined;
  if (!isPlainObject(entry)) return { state: "pending" };
  const status = isPlainObject(entry.status) ? entry.status : {};
  if (status.status_str === "error") {
    const messages = Array.isArray(status.messages) ? status.messages : [];
    const failure = messages.find((m) => Array.isArray(m) && (m[0] === "execution_error" || m[0] === "execution_interrupted"));
    return { state: "error", message: failure ? executionErrorMessage(failure[0], failure[1]) : "ComfyUI reports the prompt failed" };
  }
  if (status.completed === false) return { state: "pending" };
  const outputs = isPlainObject(entry.outputs) ? entry.outputs : {};
  const node = outputs[outputNode];
  const first = isPlainObject(node) && Array.isArray(node.images) ? node.images[0] : undefined;
  if (!isPlainObject(first) || typeof first.filename !== "string") {
    return { state: "error", message: `ComfyUI finished without an image from output node ${JSON.stringify(outputNode)}` };
  }
  return { state: "done", image: { filename: first.filename, subfolder: typeof first.subfolder === "string" ? first.subfolder : "", type: typeof first.type === "string" ? first.type : "output" } };
}

/** "execution_error in node 3 (KSampler): OutOfMemoryError: …" */
export function executionErrorMessage(event: unknown, data: unknown): string {
  if (event === "execution_interrupted") return "ComfyUI interrupted the prompt";
  const d = isPlainObject(data) ? data : {};
  const where = d.node_id !== undefined ? ` in node ${String(d.node_id)}${typeof d.node_type === "string" ? ` (${d.node_type})` : ""}` : "";
  const what = [d.exception_type, d.exception_message].filter((s) => typeof s === "string" && s !== "").join(": ");
  return `ComfyUI execution error${where}${what ? `: ${what}` : ""}`;
}

export type SocketEvent =
  | { type: "progress"; promptId?: string; fraction: number }
  | { type: "done"; promptId?: string }
  | { type: "error"; promptId?: string; message: string }
  | { type: "preview"; bytes: Uint8Array }
  | { type: "other" };

/** One websocket frame as an event of ours. */
export function socketEvent(frame: string | ArrayBuffer | Uint8Array): SocketEvent {
  if (typeof frame !== "string") {
    const bytes = frame instanceof Uint8Array ? frame : new Uint8Array(frame);
    if (bytes.byteLength > 8 && new DataView(bytes.buffer, bytes.byteOffset, 8).getUint32(0) === 1) return { type: "preview", bytes: bytes.slice(8) };
    return { type: "other" };
  }
  let msg: unknown;
  try {
    msg = JSON.parse(frame);
  } catch {
    return { type: "other" };
  }
  if (!isPlainObject(msg) || !isPlainObject(msg.data)) return { type: "other" };
  const d = msg.data;
  const promptId = typeof d.prompt_id === "string" ? d.prompt_id : undefined;
  switch (msg.type) {
    case "progress":
      if (typeof d.value === "number" && typeof d.max === "number" && d.max > 0) return { type: "progress", promptId, fraction: Math.min(1, Math.max(0, d.value / d.max)) };
      return { type: "other" };
    case "executing":
      return d.node === null ? { type: "done", promptId } : { type: "other" };
    case "execution_success":
      return { type: "done", promptId };
    case "execution_error":
    case "execution_interrupted":
      return { type: "error", promptId, message: executionErrorMessage(msg.type, d) };
    default:
      return { type: "other" };
  }
}
