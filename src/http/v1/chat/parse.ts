/**
 * The chat body before validation: OpenAI's clients send null for "not set", and Elysia's
 * validator would coerce a container of the wrong type ("hi" → ["h", "i"]) and report the
 * error deep inside it; both are settled here so errors name the field the client got wrong.
 */
import { CHAT_LIMITS } from "../../../core/chatRequest";
import { badRequest } from "../../errors";
import { isPlainObject, withoutNullFields } from "../../../core/values";

/**
 * Elysia's validator coerces a body string into an array or object before checking it ("hi"
 * becomes ["h", "i"], a lone message object becomes a one-item list), so a container of the
 * wrong type was reported deep inside the coerced value ('messages[0].role'). Checked here,
 * before validation, so the error names the field the client got wrong.
 */
function checkContainers(fields: Record<string, unknown>): void {
  const { messages, response_format: format } = fields;
  // Absent (or null) required fields: said plainly, with OpenAI's code for them.
  if (fields.model === undefined) {
    throw badRequest("Missing 'model': this field is required; send a chat model id from GET /v1/models.", "model", "missing_required_parameter");
  }
  if (messages === undefined) {
    throw badRequest(`Missing 'messages': this field is required; send ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages, each {"role", "content"}.`, "messages", "missing_required_parameter");
  }
  if (!Array.isArray(messages)) {
    throw badRequest(`Invalid 'messages': must be an array of ${CHAT_LIMITS.minMessages} to ${CHAT_LIMITS.maxMessages} messages, each {"role", "content"}.`, "messages", "invalid_value");
  }
  const bad = messages.findIndex((m) => !isPlainObject(m));
  if (bad >= 0) throw badRequest(`Invalid 'messages[${bad}]': each message must be an object {"role", "content"}.`, `messages[${bad}]`, "invalid_value");
  for (const [i, m] of (messages as Record<string, unknown>[]).entries()) checkContentParts(m.content, `messages[${i}].content`);
  if (fields.tools !== undefined && !Array.isArray(fields.tools)) {
    throw badRequest(`Invalid 'tools': must be an array of at most ${CHAT_LIMITS.maxTools} function tools.`, "tools", "invalid_value");
  }
  if (format !== undefined) {
    if (!isPlainObject(format)) {
      throw badRequest(`Invalid 'response_format': must be an object such as {"type": "json_object"}.`, "response_format", "invalid_value");
    }
    if (format.json_schema !== undefined && format.json_schema !== null && !isPlainObject(format.json_schema)) {
      throw badRequest(`Invalid 'response_format.json_schema': must be an object with 'name' and 'schema'.`, "response_format.json_schema", "invalid_value");
    }
    const schema = isPlainObject(format.json_schema) ? format.json_schema.schema : undefined;
    if (schema !== undefined && !isPlainObject(schema)) {
      throw badRequest(`Invalid 'response_format.json_schema.schema': must be a JSON Schema object.`, "response_format.json_schema.schema", "invalid_value");
    }
  }
}

/**
 * A content array may hold only text parts: an image, audio or file part is refused by its
 * own path (this service passes text only) rather than silently dropped.
 */
function checkContentParts(content: unknown, param: string): void {
  if (!Array.isArray(content)) return;
  for (const [j, part] of content.entries()) {
    if (!isPlainObject(part)) throw badRequest(`Invalid '${param}[${j}]': each content part must be an object {"type": "text", "text": string}.`, `${param}[${j}]`, "invalid_value");
    if (part.type !== "text") {
      const type = typeof part.type === "string" ? `'${part.type.slice(0, 40)}'` : "without a type";
      throw badRequest(
        `Invalid '${param}[${j}]': a content part ${type} is not supported; chat takes text only: send parts {"type": "text", "text": …} or a string.`,
        `${param}[${j}]`,
        "unsupported_content_part",
      );
    }
  }
}

/** The transform hook: nulls dropped, then container types checked (both before validation). */
export function normalizeBody(ctx: { body: unknown }): void {
  ctx.body = withoutNullFields(ctx.body);
  if (isPlainObject(ctx.body)) checkContainers(ctx.body);
}

