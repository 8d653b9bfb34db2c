/** Small helpers for the subcommands: parsing with --help, and usage errors. */
import { parseArgs, type ParseArgsConfig } from "node:util";

/** The command line itself is wrong (exit 2). */
export class UsageError extends Error {
  override name = "UsageError";
}

/** A well-formed command that cannot be carried out: unknown user or key, already revoked… (exit 1). */
export class CliError extends Error {
  override name = "CliError";
}

type Options = NonNullable<ParseArgsConfig["options"]>;

export const COMMON_OPTIONS = {
  config: { type: "string" },
  data: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies Options;

/** The help text of COMMON_OPTIONS, at the end of every command's usage. */
export const COMMON_HELP = `Options on every command:
  --config PATH   TOML configuration file (or ATELIER_CONFIG)
  --data DIR      data directory holding atelier.db (or ATELIER_DATA; default ./data)
  -h, --help      show help`;

export function parseCommand<O extends Options>(argv: string[], options: O, usage: string) {
  const all = { ...COMMON_OPTIONS, ...options };
  try {
    return parseArgs({ args: withNegativeNumbers(argv, all), options: all, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError(`${(e as Error).message}\n\n${usage}`);
  }
}

const NEGATIVE_NUMBER = /^-\d/;

/**
 * node:util reads "-3" as an unknown option ("Unknown option '-3'"), which hides what the operator
 * typed: a negative number. Such words become values (`--credits -1` → `--credits=-1`) or
 * positionals (moved behind `--`, order kept), so the command's own check names the argument and
 * the rule ("N must be a positive integer, got \"-3\"").
 */
function withNegativeNumbers(argv: string[], options: Options): string[] {
  if (!argv.some((a) => NEGATIVE_NUMBER.test(a))) return argv;
  const flags: string[] = [];
  const positionals: string[] = [];
  // Only long options: none of ours has a short form that takes a value.
  const takesValue = (word: string) => word.startsWith("--") && !word.includes("=") && options[word.slice(2)]?.type === "string";
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!;
    if (word === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (word.startsWith("-") && !NEGATIVE_NUMBER.test(word)) {
      const next = argv[i + 1];
      if (takesValue(word) && next !== undefined) {
        flags.push(`${word}=${next}`);
        i++;
      } else flags.push(word);
    } else positionals.push(word);
  }
  return [...flags, "--", ...positionals];
}

/** For commands that take no positional arguments: a stray word is a mistake, not something to ignore. */
export function noPositionals(command: string, positionals: string[], usage: string): void {
  if (positionals.length > 0) throw new UsageError(`${command} takes no arguments, got ${JSON.stringify(positionals.join(" "))}\n\n${usage}`);
}


export function positiveInteger(name: string, raw: string | undefined, allowZero = false, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(raw);
  if (raw === undefined || !/^\d+$/.test(raw) || !Number.isSafeInteger(n) || (!allowZero && n === 0)) {
    throw new UsageError(`${name} must be a ${allowZero ? "non-negative" : "positive"} integer, got ${JSON.stringify(raw ?? "")}`);
  }
  if (n > max) throw new UsageError(`${name} must be at most ${max}, got ${raw}`);
  return n;
}
