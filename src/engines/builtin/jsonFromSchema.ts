/**
 * Builds a value that satisfies a client's JSON Schema, for the built-in chat engine's
 * `response_format: json_schema` replies. Covers what structured-output schemas use in
 * practice: object/array/string/number/integer/boolean/null, enum/const, nullable type lists,
 * anyOf/oneOf (first branch), allOf (merged), local $ref ($defs/definitions), string and
 * number bounds. The schema is client input: depth and array sizes are capped so a recursive
 * or huge schema cannot make the reply explode, and so is the size of the whole value
 * (MAX_VALUE_CHARS, MAX_VALUES): `minLength: 1000000000`, or arrays nested a dozen deep, would otherwise
 * build a reply large enough to take the server down. A value cut at that size no longer
 * matches the schema, and says so (`complete: false`), like a model stopped by its output limit.
 */

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Schema = Record<string, unknown>;

const MAX_DEPTH = 12;
const MAX_ARRAY_ITEMS = 20;
/** Upper bound on the characters of one generated value (about 250k tokens). */
export const MAX_VALUE_CHARS = 1_000_000;
/** Upper bound on the number of values (each costs a schema lookup; this keeps one reply well under a second). */
export const MAX_VALUES = 20_000;
/** What each value costs besides its text: punctuation, a key, a scalar. */
const VALUE_OVERHEAD = 8;

export interface SchemaFillContext {
  /** Text used for free-form string fields (the built-in engine passes the last user message). */
  text: string;
}

/** The context while filling: what is left of the size budget, and whether anything was cut. */
interface Filling extends SchemaFillContext {
  left: number;
  valuesLeft: number;
  cut: boolean;
}

function isSchema(v: unknown): v is Schema {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function num(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

/** Resolves "#/$defs/x", "#/definitions/x" or any local JSON pointer against the root schema. */
function resolveRef(root: Schema, ref: string): Schema | undefined {
  if (!ref.startsWith("#")) return undefined;
  let at: unknown = root;
  for (const raw of ref.slice(1).split("/").filter(Boolean)) {
    let key: string;
    try {
      key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    } catch {
      return undefined; // not valid percent-encoding: a reference to nothing
    }
    if (!isSchema(at)) return undefined;
    at = at[key];
  }
  return isSchema(at) ? at : undefined;
}

/**
 * allOf branches folded into one schema (properties and required lists merged). Each branch
 * spends the value budget: `allOf: [{$ref: "#"}, {$ref: "#"}, {$ref: "#"}]` branches 3^depth times.
 */
function mergeAllOf(root: Schema, schema: Schema, depth: number, ctx: Filling): Schema {
  const parts = Array.isArray(schema.allOf) ? schema.allOf.filter(isSchema) : [];
  if (parts.length === 0) return schema;
  const merged: Schema = { ...schema };
  delete merged.allOf;
  const properties: Schema = isSchema(schema.properties) ? { ...schema.properties } : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === "string") : []);
  for (const raw of parts) {
    if (ctx.valuesLeft <= 0) {
      ctx.cut = true;
      break;
    }
    ctx.valuesLeft -= 1;
    const part = mergeAllOf(root, deref(root, raw, depth), depth + 1, ctx);
    for (const [k, v] of Object.entries(part)) {
      if (k === "properties" && isSchema(v)) Object.assign(properties, v);
      else if (k === "required" && Array.isArray(v)) v.forEach((r) => typeof r === "string" && required.add(r));
      else if (!(k in merged)) merged[k] = v;
    }
  }
  if (Object.keys(properties).length > 0) merged.properties = properties;
  if (required.size > 0) merged.required = [...required];
  return merged;
}

function deref(root: Schema, schema: Schema, depth: number): Schema {
  let s = schema;
  for (let hops = 0; typeof s.$ref === "string" && hops < MAX_DEPTH; hops++) {
    const target = resolveRef(root, s.$ref);
    if (!target) return {};
    // Sibling keywords next to $ref (allowed since draft 2019-09) refine the target.
    const { $ref: _, ...rest } = s;
    s = { ...target, ...rest };
  }
  return depth > MAX_DEPTH ? {} : s;
}

function typeOf(schema: Schema): string | undefined {
  const t = schema.type;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    // Prefer a concrete type over "null" so the reply shows the field's shape.
    const types = t.filter((x): x is string => typeof x === "string");
    return types.find((x) => x !== "null") ?? types[0];
  }
  if (isSchema(schema.properties) || schema.required !== undefined) return "object";
  if (schema.items !== undefined || schema.prefixItems !== undefined) return "array";
  return undefined;
}

function fillString(schema: Schema, ctx: Filling): string {
  switch (schema.format) {
    case "date-time":
      return "2026-01-01T00:00:00Z";
    case "date":
      return "2026-01-01";
    case "time":
      return "00:00:00Z";
    case "email":
      return "user@example.com";
    case "uri":
    case "url":
      return "https://example.com/";
    case "uuid":
      return "00000000-0000-4000-8000-000000000000";
  }
  const min = num(schema.minLength) ?? 0;
  const max = num(schema.maxLength);
  let s = ctx.text;
  if (max !== undefined && s.length > max) s = [...s].slice(0, Math.max(0, max)).join("");
  const room = Math.max(0, ctx.left);
  if (s.length > room) {
    s = [...s].slice(0, room).join("");
    ctx.cut = true;
  }
  if (s.length < min) {
    const padded = Math.min(min, room);
    if (padded < min) ctx.cut = true;
    if (padded > s.length) s += "x".repeat(padded - s.length);
  }
  ctx.left -= s.length;
  return s;
}

function fillNumber(schema: Schema, integer: boolean): number {
  const min = num(schema.minimum);
  const max = num(schema.maximum);
  const exMin = num(schema.exclusiveMinimum);
  const exMax = num(schema.exclusiveMaximum);
  const multiple = num(schema.multipleOf);
  const fits = (v: number) =>
    Number.isFinite(v) &&
    (min === undefined || v >= min) &&
    (max === undefined || v <= max) &&
    (exMin === undefined || v > exMin) &&
    (exMax === undefined || v < exMax) &&
    (!integer || Number.isInteger(v)) &&
    (multiple === undefined || multiple <= 0 || Number.isInteger(v / multiple));
  const lo = Math.max(min ?? -Infinity, exMin ?? -Infinity);
  const hi = Math.min(max ?? Infinity, exMax ?? Infinity);
  // Zero when allowed, else a value at or just inside the bounds.
  const candidates = [0, lo, Math.ceil(lo), Math.floor(lo) + 1, (lo + hi) / 2, Math.floor((lo + hi) / 2), hi, Math.floor(hi), Math.ceil(hi) - 1];
  if (multiple !== undefined && multiple > 0) {
    const base = Number.isFinite(lo) ? lo : Number.isFinite(hi) ? hi - multiple * 2 : 0;
    for (let k = 0; k < 3; k++) candidates.push((Math.ceil(base / multiple) + k) * multiple);
  }
  return candidates.find(fits) ?? (Number.isFinite(lo) ? lo : Number.isFinite(hi) ? hi : 0);
}

function fill(root: Schema, raw: Schema, ctx: Filling, depth: number): Json {
  if (ctx.left <= 0 || ctx.valuesLeft <= 0) {
    ctx.cut = true;
    return null;
  }
  ctx.left -= VALUE_OVERHEAD;
  ctx.valuesLeft -= 1;
  if (depth > MAX_DEPTH) return null;
  const schema = mergeAllOf(root, deref(root, raw, depth), depth, ctx);
  if ("const" in schema) return (schema.const ?? null) as Json;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return (schema.enum[0] ?? null) as Json;
  const branches = Array.isArray(schema.anyOf) ? schema.anyOf : Array.isArray(schema.oneOf) ? schema.oneOf : undefined;
  if (branches) {
    // The first branch that is not just `null`, so the reply shows a real value.
    const pick = branches.filter(isSchema).find((b) => b.type !== "null") ?? branches.find(isSchema);
    return pick ? fill(root, pick, ctx, depth + 1) : null;
  }
  switch (typeOf(schema)) {
    case "object": {
      const out: { [k: string]: Json } = {};
      const properties = isSchema(schema.properties) ? schema.properties : {};
      const required = Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === "string") : [];
      // Every declared property (a superset of the required ones), then required names the
      // schema did not describe, filled from additionalProperties when it gives a schema.
      for (const [k, v] of Object.entries(properties)) out[k] = fill(root, isSchema(v) ? v : {}, ctx, depth + 1);
      for (const k of required) {
        if (!(k in out)) out[k] = fill(root, isSchema(schema.additionalProperties) ? schema.additionalProperties : {}, ctx, depth + 1);
      }
      return out;
    }
    case "array": {
      const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems.filter(isSchema) : [];
      const items = isSchema(schema.items) ? schema.items : {};
      const min = num(schema.minItems) ?? 0;
      const max = num(schema.maxItems) ?? Infinity;
      // One element by default, so the reply shows the element shape.
      const count = Math.min(Math.max(min, prefix.length, 1), max, MAX_ARRAY_ITEMS);
      return Array.from({ length: count }, (_, i) => fill(root, prefix[i] ?? items, ctx, depth + 1));
    }
    case "string":
      return fillString(schema, ctx);
    case "integer":
      return fillNumber(schema, true);
    case "number":
      return fillNumber(schema, false);
    case "boolean":
      return true;
    case "null":
      return null;
    default:
      // An unconstrained schema ({}): any JSON value is valid; a string carries the request's text.
      return ctx.text;
  }
}

/** A JSON value matching `schema` as far as the supported keywords go. */
export function valueFromSchema(schema: Record<string, unknown>, ctx: SchemaFillContext): Json {
  return fillFromSchema(schema, ctx).value;
}

/** The value, and whether it is complete (false: cut at MAX_VALUE_CHARS, so it may not match). */
export function fillFromSchema(schema: Record<string, unknown>, ctx: SchemaFillContext): { value: Json; complete: boolean } {
  const filling: Filling = { ...ctx, left: MAX_VALUE_CHARS, valuesLeft: MAX_VALUES, cut: false };
  const value = fill(schema, schema, filling, 0);
  return { value, complete: !filling.cut };
}
