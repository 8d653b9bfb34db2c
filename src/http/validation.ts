/**
 * One formatter for a request that failed its TypeBox schema, whether Elysia validated it or a
 * route checked it with Value.Check (the image routes, whose bodies arrive as JSON or
 * multipart): 400 with `param` = the path of the first failing field and the rule in words.
 * Only the first error is computed, so a huge invalid array costs one check, not one per item.
 */
import type { TSchema } from "elysia";
import type { ValueError } from "@sinclair/typebox/value";
import { pathFromPointer } from "../core/valuePath";
import { badRequest, type ApiError } from "./errors";

/** Elysia's ValidationError, as much of it as we read. */
interface ElysiaValidationFailure {
  type?: string;
  valueError?: ValueError;
}

export function formatValidationError(error: ElysiaValidationFailure): ApiError {
  return describeFirstError(error.valueError, error.type && error.type !== "body" ? ` in ${error.type}` : "");
}

/** The 400 for the first error TypeBox reported (in `where`: "" for the body, " in query", …). */
export function describeFirstError(first: ValueError | undefined, where = ""): ApiError {
  if (!first) return badRequest(`Invalid request${where}.`, null, "invalid_value");
  const param = pathFromPointer(first.path);
  // A schema may state its rule in words (`error: "must be a number from 0 to 2"`); prefer that.
  const stated = (first.schema as { error?: unknown }).error;
  const missing = first.value === undefined && first.path !== "";
  const rule = typeof stated === "string" ? stated : missing ? "this field is required" : describeRule(first.schema, first.message);
  const code = missing && typeof stated !== "string" ? "missing_required_parameter" : "invalid_value";
  return badRequest(param ? `Invalid '${param}'${where}: ${rule}.` : `Invalid request${where}: ${rule}.`, param, code);
}

/** A readable rule for a failed union: the allowed constants, or else the allowed types. */
function describeRule(schema: TSchema, message: string): string {
  const branches = schema.anyOf as TSchema[] | undefined;
  if (!branches) return message;
  const options = branches.flatMap((s) => ("const" in s ? [JSON.stringify(s.const)] : "anyOf" in s ? (s.anyOf as TSchema[]).filter((x) => "const" in x).map((x) => JSON.stringify(x.const)) : []));
  if (options.length > 0) return `expected one of ${options.join(", ")}`;
  const types = [...new Set(branches.map((s) => String(s.type ?? "value")))];
  return `expected ${types.map((x) => (x === "null" ? "null" : /^[aeiou]/.test(x) ? `an ${x}` : `a ${x}`)).join(" or ")}`;
}
