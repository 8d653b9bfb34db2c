/**
 * The streaming scanner of JSON uploads (http/jsonUploads: what /v1/images/* bodies go through
 * as they arrive) on bodies of one size and different shapes, side by side in one process, fed
 * in 256 KiB chunks (what Bun hands a reader that keeps up): its time per MiB should not depend
 * on the shape. Numbers are the baseline (no strings to skip); before the fifteenth pass a chunk
 * of empty strings cost 33× that (each string searched the rest of its chunk for a backslash).
 *
 *   bun bench/json-scan.ts [--mib=16] [--rounds=5]
 */
import { JsonUploadScanner } from "../src/http/jsonUploads";
import { generationUploads } from "../src/http/v1/images/parse";
import { benchArg, median } from "./support/chatBench";

const mib = Number(benchArg("mib", "16"));
const rounds = Number(benchArg("rounds", "5"));
const CHUNK = 256 * 1024;

/** `{"prompt":"x","junk":[unit,unit,…]}` of about `mib` MiB. */
function body(unit: string): Uint8Array {
  const head = '{"prompt":"x","junk":[';
  const count = Math.floor((mib * 1024 * 1024 - head.length - 2) / (unit.length + 1));
  return new TextEncoder().encode(`${head}${Array(count).fill(unit).join(",")}]}`);
}

const shapes: Record<string, Uint8Array> = {
  "numbers 0 (baseline)": body("0"),
  'empty strings ""': body('""'),
  'short strings "abc"': body('"abc"'),
  'escaped strings "a\\"b"': body('"a\\"b"'),
  "objects {\"k\":1}": body('{"k":1}'),
};

function scan(bytes: Uint8Array): number {
  const started = performance.now();
  const scanner = new JsonUploadScanner(generationUploads);
  for (let at = 0; at < bytes.length; at += CHUNK) scanner.write(bytes.subarray(at, at + CHUNK));
  scanner.end();
  return performance.now() - started;
}

const times = new Map<string, number[]>(Object.keys(shapes).map((k) => [k, []]));
for (let round = 0; round < rounds; round++) for (const [name, bytes] of Object.entries(shapes)) times.get(name)!.push(scan(bytes));
const baseline = median(times.get("numbers 0 (baseline)")!);
console.log(`${mib} MiB bodies in ${CHUNK / 1024} KiB chunks, median of ${rounds} rounds:`);
for (const [name, t] of times) console.log(`  ${name.padEnd(26)} ${(median(t) / mib).toFixed(2).padStart(8)} ms/MiB   ${(median(t) / baseline).toFixed(2)}× the baseline`);
