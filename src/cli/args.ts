/** Small helpers for the subcommands: parsing with --help, and usage errors. */
import { parseArgs, type ParseArgsConfig } from "node:util";

export class UsageError extends Error {
  override name = "UsageError";
}

type Options = NonNullable<ParseArgsConfig["options"]>;

export const COMMON_OPTIONS = {
  config: { type: "string" },
  data: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies Options;

export function parseCommand<O extends Options>(argv: string[], options: O, usage: string) {
  try {
    return parseArgs({ args: argv, options: { ...COMMON_OPTIONS, ...options }, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError(`${(e as Error).message}\n\n${usage}`);
  }
}

export function positiveInteger(name: string, raw: string | undefined, allowZero = false): number {
  const n = Number(raw);
  if (raw === undefined || !/^\d+$/.test(raw) || !Number.isSafeInteger(n) || (!allowZero && n === 0)) {
    throw new UsageError(`${name} must be a ${allowZero ? "non-negative" : "positive"} integer, got ${JSON.stringify(raw ?? "")}`);
  }
  return n;
}
