/**
 * A strict parser of the Prometheus text exposition format (version 0.0.4): every sample must
 * belong to a family declared by `# TYPE` (histograms: `_bucket`, `_sum`, `_count`), names and
 * labels must be well-formed, label values correctly escaped, values floats, and no series may
 * appear twice. Throws on anything else.
 */
export interface PromSample {
  /** The sample's own name (e.g. x_bucket). */
  name: string;
  /** The family it belongs to (e.g. x). */
  family: string;
  labels: Record<string, string>;
  value: number;
}

export interface PromText {
  types: Map<string, string>;
  help: Map<string, string>;
  samples: PromSample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

function parseValue(text: string, line: string): number {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`bad value in: ${line}`);
  return Number(text);
}

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf("=", i);
    if (eq < 0) throw new Error(`bad labels in: ${line}`);
    const name = text.slice(i, eq);
    if (!LABEL.test(name) || name in labels) throw new Error(`bad or repeated label '${name}' in: ${line}`);
    if (text[eq + 1] !== '"') throw new Error(`unquoted label value in: ${line}`);
    let value = "";
    let j = eq + 2;
    for (;; j++) {
      if (j >= text.length) throw new Error(`unterminated label value in: ${line}`);
      const c = text[j]!;
      if (c === '"') break;
      if (c === "\\") {
        const next = text[++j];
        if (next === "\\") value += "\\";
        else if (next === '"') value += '"';
        else if (next === "n") value += "\n";
        else throw new Error(`bad escape in: ${line}`);
      } else value += c;
    }
    labels[name] = value;
    i = j + 1;
    if (text[i] === ",") i++;
    else if (i !== text.length) throw new Error(`bad label separator in: ${line}`);
  }
  return labels;
}

function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    const base = name.slice(0, -suffix.length);
    if (name.endsWith(suffix) && (types.get(base) === "histogram" || (suffix !== "_bucket" && types.get(base) === "summary"))) return base;
  }
  return undefined;
}

export function parsePromText(text: string): PromText {
  const types = new Map<string, string>();
  const help = new Map<string, string>();
  const samples: PromSample[] = [];
  const seen = new Set<string>();
  for (const line of text.split("\n")) {
    if (line === "") continue;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) continue; // a plain comment
      const [, kind, name, rest] = m;
      if (!NAME.test(name!)) throw new Error(`bad metric name in: ${line}`);
      if (kind === "TYPE") {
        if (!TYPES.has(rest!) || types.has(name!)) throw new Error(`bad or repeated TYPE: ${line}`);
        types.set(name!, rest!);
      } else help.set(name!, rest!);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    if (!m) throw new Error(`bad sample line: ${line}`);
    const [, name, labelText, valueText] = m;
    const family = familyOf(name!, types);
    if (family === undefined) throw new Error(`sample without a TYPE: ${line}`);
    const labels = parseLabels(labelText ?? "", line);
    const key = name + JSON.stringify(Object.entries(labels).sort());
    if (seen.has(key)) throw new Error(`repeated series: ${line}`);
    seen.add(key);
    samples.push({ name: name!, family, labels, value: parseValue(valueText!, line) });
  }
  return { types, help, samples };
}
