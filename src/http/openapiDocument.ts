/**
 * Final touches on the document @elysiajs/openapi generates, applied to what /openapi.json
 * serves (and therefore to `atelier openapi` and the committed openapi/openapi.json):
 *  - `t.Ref("Model")` inside a model comes out as `{"$ref":"Model"}`, which no resolver can
 *    follow; it becomes `#/components/schemas/Model`.
 *  - component schemas carry TypeBox's `$id` ("#/components/schemas/X"), which JSON Schema
 *    2020-12 would treat as a base URI change; dropped.
 *  - error responses get a description that says when the status happens, instead of the
 *    generator's "Response for status 401".
 */
import { ERROR_DESCRIPTIONS } from "./shared";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const isObject = (v: Json | undefined): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

function fixRefs(node: Json, schemaNames: Set<string>): Json {
  if (Array.isArray(node)) return node.map((n) => fixRefs(n, schemaNames));
  if (!isObject(node)) return node;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "$ref" && typeof value === "string" && !value.includes("/") && schemaNames.has(value)) {
      out[key] = `#/components/schemas/${value}`;
    } else {
      out[key] = fixRefs(value, schemaNames);
    }
  }
  return out;
}

const HTTP_METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);

export function polishOpenApiDocument(input: unknown): JsonObject {
  // A JSON round trip gives an independent plain copy (the plugin caches and reuses its object).
  const doc = JSON.parse(JSON.stringify(input)) as JsonObject;
  const components = isObject(doc.components) ? doc.components : undefined;
  const schemas = components && isObject(components.schemas) ? components.schemas : {};
  for (const schema of Object.values(schemas)) {
    if (isObject(schema)) delete schema.$id;
  }
  const fixed = fixRefs(doc, new Set(Object.keys(schemas))) as JsonObject;

  const paths = isObject(fixed.paths) ? fixed.paths : {};
  for (const item of Object.values(paths)) {
    if (!isObject(item)) continue;
    for (const [method, operation] of Object.entries(item)) {
      if (!HTTP_METHODS.has(method) || !isObject(operation) || !isObject(operation.responses)) continue;
      for (const [status, response] of Object.entries(operation.responses)) {
        if (!isObject(response)) continue;
        const generic = typeof response.description !== "string" || response.description.startsWith("Response for status");
        if (!generic) continue;
        const known = ERROR_DESCRIPTIONS[Number(status)];
        if (known) response.description = known;
        else if (status.startsWith("2")) response.description = "Successful response.";
      }
    }
  }
  return fixed;
}
