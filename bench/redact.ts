/**
 * What redacting an upstream's answer costs per character, beside the way it was done before
 * (in the same run): every answer from an upstream passes through the SecretRedactor, so its
 * cost grows with the answer (a chat reply of a few KB, a streamed one piece by piece).
 *
 *   bun bench/redact.ts
 *
 * Secrets shaped like real ones (an OpenAI project key of 164 characters, a 51-character key, a
 * 32-character password; their raw, JSON and URL spellings), answers of ordinary English text
 * (no secret in it: the common case, where every position is looked at) from 40 to 16 000
 * characters. "before": each position's first character looked up in a set of the windows'
 * first characters, then a slice of 8 looked up in the set of windows (the previous
 * SecretRedactor.marks); "now": SecretRedactor.answer (engines/fragmentIndex.ts). Both must
 * find the same windows in a text that holds secrets; the script checks it.
 */
import { FRAGMENT_CHARS, SecretRedactor } from "../src/engines/redact";
import { benchText } from "./support/chatServers";

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
let seed = 42;
const random = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
const token = (n: number) => Array.from({ length: n }, () => ALPHABET[Math.floor(random() * ALPHABET.length)]).join("");
const secrets = [`sk-proj-${token(156)}`, `sk-${token(48)}`, token(32)];

/** The previous marks(): the windows' first characters, then the window itself, per position. */
function beforeMarks(secretList: string[]) {
  const windows = new Set<string>();
  const firstChars = new Set<string>();
  for (const raw of secretList) {
    for (const s of new Set([raw, JSON.stringify(raw).slice(1, -1), encodeURIComponent(raw)])) {
      for (let i = 0; i + FRAGMENT_CHARS <= s.length; i++) {
        windows.add(s.slice(i, i + FRAGMENT_CHARS));
        firstChars.add(s[i]!);
      }
    }
  }
  return (text: string): Uint8Array | null => {
    let marked: Uint8Array | null = null;
    for (let i = 0; i + FRAGMENT_CHARS <= text.length; i++) {
      if (!firstChars.has(text[i]!)) continue;
      if (!windows.has(text.slice(i, i + FRAGMENT_CHARS))) continue;
      marked ??= new Uint8Array(text.length);
      marked.fill(1, i, i + FRAGMENT_CHARS);
    }
    return marked;
  };
}

const before = beforeMarks(secrets);
const now = new SecretRedactor(secrets);

// Same windows found: the redacted text of one that holds fragments is the same either way.
const leaky = `Here: ${secrets[0]!.slice(20, 60)} and ${JSON.stringify(secrets[1]).slice(5, 30)} then ${encodeURIComponent(secrets[2]!)}.`;
const marked = before(leaky)!;
let expected = "";
for (let i = 0; i < leaky.length; ) {
  if (marked[i]) {
    while (i < leaky.length && marked[i]) i++;
    expected += "[redacted]";
  } else expected += leaky[i++];
}
if (now.answer(leaky) !== expected) throw new Error(`the two disagree:\n${now.answer(leaky)}\n${expected}`);

console.log(`Bun ${Bun.version}; secrets of ${secrets.map((s) => s.length).join(", ")} characters (3 spellings each)`);
console.log("answer chars   before ns/char   now ns/char   before µs/answer   now µs/answer");
for (const size of [40, 1000, 4000, 16000]) {
  const text = benchText(size);
  const time = (f: () => unknown) => {
    const runs = Math.max(200, Math.floor(4_000_000 / size));
    for (let i = 0; i < runs / 4; i++) f();
    const t0 = performance.now();
    for (let i = 0; i < runs; i++) f();
    return ((performance.now() - t0) * 1000) / runs;
  };
  const b = time(() => before(text));
  const n = time(() => now.answer(text));
  console.log(`${String(size).padStart(12)} ${((b * 1000) / size).toFixed(1).padStart(16)} ${((n * 1000) / size).toFixed(1).padStart(13)} ${b.toFixed(2).padStart(18)} ${n.toFixed(2).padStart(15)}`);
}
