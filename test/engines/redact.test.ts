/**
 * The redactor's rule, "no substring of 8 or more characters of any configured secret in the
 * output", checked on the cases that used to leak (a key straddling the 500-character cut, a
 * WebUI detail array, `sk-` without a word boundary, fragments at the edges of a text that was
 * already cut) and as a property over random secrets and texts. Also the places that apply it:
 * upstreamMessage, the pool (unexpected errors, stored disabled reasons) and the status views.
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { loadConfig } from "../../src/config";
import { AccountPool, AttemptFailure, type PoolSettings } from "../../src/engines/pool";
import { FRAGMENT_CHARS, MAX_UPSTREAM_MESSAGE_CHARS, REDACTED, SecretRedactor } from "../../src/engines/redact";
import { storedStatus } from "../../src/engines/status";
import { UpstreamFailed } from "../../src/core/engine";
import { upstreamMessage } from "../../src/engines/upstreamHttp";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";

const KEY = "atl-live-Q7w9Zk2mPx4Rt8Vb3Nc6Hd1Jf5";
const PASSWORD = 'Tr0ub4dor"3/horse-battery-staple';
const redactor = SecretRedactor.forAccounts([{ api_key: KEY }, { username: "painter", password: PASSWORD }]);

/** Every FRAGMENT_CHARS window of `secret` that occurs in `text`. */
function fragments(text: string, secret: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + FRAGMENT_CHARS <= secret.length; i++) {
    const w = secret.slice(i, i + FRAGMENT_CHARS);
    if (text.includes(w)) out.push(w);
  }
  return out;
}

describe("the rule on the cases that leaked", () => {
  test("a key straddling the 500-character cut: redacted first, then cut, no half survives", () => {
    for (let lead = 1; lead < KEY.length; lead++) {
      const body = "x".repeat(MAX_UPSTREAM_MESSAGE_CHARS - lead) + KEY + " and more";
      for (const text of [body, JSON.stringify({ error: { message: body } }), JSON.stringify({ detail: body })]) {
        const msg = upstreamMessage(text, redactor);
        expect(msg.length).toBeLessThanOrEqual(MAX_UPSTREAM_MESSAGE_CHARS);
        expect(fragments(msg, KEY)).toEqual([]);
        // Redaction may shorten the text below the limit; otherwise the cut shows.
        expect(msg.endsWith("…") || msg.endsWith(`${REDACTED} and more`)).toBe(true);
      }
    }
  });

  test("a WebUI detail array: the password (whose JSON form differs) is redacted inside it, before the cut", () => {
    for (const lead of [3, 8, 12, 20]) {
      const head = JSON.stringify([{ loc: ["body"], msg: "" }]).indexOf('msg":"') + 6;
      const msg = "y".repeat(MAX_UPSTREAM_MESSAGE_CHARS - head - lead) + PASSWORD;
      const text = upstreamMessage(JSON.stringify({ detail: [{ loc: ["body"], msg, type: "value_error" }] }), redactor);
      expect(fragments(text, PASSWORD)).toEqual([]);
      expect(fragments(text, JSON.stringify(PASSWORD).slice(1, -1))).toEqual([]);
      expect(text.length).toBeLessThanOrEqual(MAX_UPSTREAM_MESSAGE_CHARS);
    }
    // A short array still reads as JSON, with the secret replaced.
    expect(upstreamMessage(JSON.stringify({ detail: [{ msg: `bad ${PASSWORD}` }] }), redactor)).toBe(`[{"msg":"bad ${REDACTED}"}]`);
  });

  test("an already cut text: the key's tail at the start and its head at the end are redacted", () => {
    expect(redactor.message(`${KEY.slice(5)} was refused; retry with ${KEY.slice(0, 10)}`)).toBe(`${REDACTED} was refused; retry with ${REDACTED}`);
    // Seven characters say too little to be redacted (the rule starts at eight).
    expect(redactor.message(`${KEY.slice(-7)} done`)).toBe(`${KEY.slice(-7)} done`);
  });

  test("sk- tokens need no word boundary; Bearer and Basic credentials go too", () => {
    const none = new SecretRedactor([]);
    expect(none.message("token xsk-abcdefghijkl and id_sk-abcdefghijkl and key=sk-abcdefghijkl")).toBe(
      `token xsk-${REDACTED} and id_sk-${REDACTED} and key=sk-${REDACTED}`,
    );
    expect(none.message("Authorization: Bearer abc.def-ghi and basic dXNlcjpwYXNz")).toBe(`Authorization: Bearer ${REDACTED} and basic ${REDACTED}`);
  });

  test("the Basic credential of a configured username:password, even without the word Basic", () => {
    const basic = Buffer.from(`painter:${PASSWORD}`).toString("base64");
    expect(fragments(redactor.answer(`header was ${basic}`), basic)).toEqual([]);
    expect(fragments(redactor.answer(`url ${encodeURIComponent(PASSWORD)}`), encodeURIComponent(PASSWORD))).toEqual([]);
  });

  test("a short secret is removed whole; shorter than 4 characters is ignored", () => {
    const r = new SecretRedactor(["hunter2", "abc"]);
    expect(r.answer("pw hunter2, not hunter, abc")).toBe(`pw ${REDACTED}, not hunter, abc`);
  });
});

describe("answers and cuts", () => {
  test("answers lose the configured secrets only; key-looking words stay", () => {
    expect(redactor.answer(`Set OPENAI_API_KEY=sk-abcdefghijkl; yours is ${KEY}.`)).toBe(`Set OPENAI_API_KEY=sk-abcdefghijkl; yours is ${REDACTED}.`);
    expect(redactor.answer("A lighthouse at dusk")).toBe("A lighthouse at dusk");
  });

  test("adjacent and overlapping fragments become one marker", () => {
    expect(redactor.answer(`${KEY}${KEY.slice(2, 20)}${PASSWORD}!`)).toBe(`${REDACTED}!`);
  });

  test("a cut never splits a marker or a surrogate pair, and keeps to the limit", () => {
    const text = `${"a".repeat(14)}${KEY} tail`;
    for (let max = 1; max < 40; max++) {
      const out = redactor.message(text, max);
      expect(out.length).toBeLessThanOrEqual(max);
      expect(out.replaceAll(REDACTED, "")).not.toMatch(/\[/);
    }
    const emoji = redactor.message(`${"b".repeat(8)}🎨🎨🎨`, 10);
    expect(emoji).toBe(`${"b".repeat(8)}…`);
  });

  test("a secret made of the marker's own characters cannot come back through the marker", () => {
    const r = new SecretRedactor(["d][redacted][re"]);
    for (const text of ["x d][redacted][re y", "[redacted][redacted]", "ed][redacted][red"]) {
      const out = r.message(text, 200);
      expect(fragments(out, "d][redacted][re")).toEqual([]);
    }
  });
});

describe("property: no window of a secret survives", () => {
  const alphabet = "abcXYZ019-_./\"\\:=[]é🎨 ";
  const char = fc.constantFrom(...[...alphabet]);
  const secretArb = fc.array(char, { minLength: 8, maxLength: 40 }).map((cs) => cs.join(""));
  const noise = fc.array(char, { maxLength: 30 }).map((cs) => cs.join(""));

  /** A text of noise, fragments (≥ 8 characters) of the secrets, the marker and patterns, in any order. */
  const textFor = (secrets: string[]) =>
    fc.array(
      fc.oneof(
        noise,
        fc.constantFrom(REDACTED, "sk-", "Bearer ", "…"),
        fc.tuple(fc.nat(secrets.length - 1), fc.nat(), fc.nat()).map(([which, a, b]) => {
          const s = secrets[which]!;
          const len = FRAGMENT_CHARS + (b % (s.length - FRAGMENT_CHARS + 1));
          const start = a % (s.length - len + 1);
          return s.slice(start, start + len);
        }),
      ),
      { maxLength: 12 },
    ).map((parts) => parts.join(""));

  const scenario = fc
    .array(secretArb, { minLength: 1, maxLength: 3 })
    .chain((secrets) => fc.tuple(fc.constant(secrets), textFor(secrets), fc.integer({ min: 1, max: 120 })));

  test("answer() and message() at any cut", () => {
    fc.assert(
      fc.property(scenario, ([secrets, text, max]) => {
        const r = new SecretRedactor(secrets);
        for (const out of [r.answer(text), r.message(text), r.message(text, max)]) {
          for (const s of secrets) expect(fragments(out, s)).toEqual([]);
        }
        expect(r.message(text, max).length).toBeLessThanOrEqual(max);
      }),
      { numRuns: 2000 },
    );
  });

  test("a text without fragments passes through answer() unchanged", () => {
    fc.assert(
      fc.property(secretArb, noise, (secret, text) => {
        const r = new SecretRedactor([secret]);
        if (!r.leaks(text)) expect(r.answer(text)).toBe(text);
      }),
      { numRuns: 1000 },
    );
  });
});

describe("where the pool and the status views apply it", () => {
  const SETTINGS: PoolSettings = {
    attemptTimeoutMs: 1000,
    maxAttempts: 1,
    deadlineMs: 5000,
    queueTimeoutMs: 2000,
    rateLimitCooldownMaxMs: 8000,
    failureThreshold: 1,
    failureCooldownMs: 1000,
    failureCooldownMaxMs: 4000,
  };

  test("an error the attempt did not expect: redacted in the thrown error, the log and the snapshot", async () => {
    const store = createStore(openDatabase(":memory:"), latestVersion());
    const logs: string[] = [];
    const log = (msg: string, f?: Record<string, unknown>) => logs.push(JSON.stringify({ msg, ...f }));
    const pool = new AccountPool("up", [{ id: "a", weight: 1, maxConcurrency: 1 }], SETTINGS, store.upstreams, Date.now, { warn: log, info: log }, redactor);
    const err = await pool.run(async () => {
      throw new TypeError(`cannot parse ${"z".repeat(290)}${KEY}`);
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamFailed);
    await pool.persistSnapshot();
    const snapshots = JSON.stringify([...(await store.upstreams.loadSnapshots()).values()]);
    for (const text of [(err as Error).message, logs.join("\n"), snapshots]) expect(fragments(text, KEY)).toEqual([]);
    expect(logs.join("\n")).toContain("zzz");
  });

  test("a 401 straddling the 300-character cut of the stored reason; an older version's reason is redacted on the way out", async () => {
    const store = createStore(openDatabase(":memory:"), latestVersion());
    const pool = new AccountPool("up", [{ id: "a", weight: 1, maxConcurrency: 1 }], SETTINGS, store.upstreams, Date.now, undefined, redactor);
    await pool.run(async () => {
      throw new AttemptFailure("auth", `credentials refused (401): ${"w".repeat(250)}${KEY}`, undefined, 401);
    }).catch(() => {});
    expect(fragments((await store.upstreams.listDisabled())[0]!.reason, KEY)).toEqual([]);

    // As an older version stored it: cut first, half a key kept.
    await store.upstreams.disableAccount("up", "a", `Incorrect API key provided: ${KEY.slice(0, 20)}`, 1);
    await pool.refresh();
    expect(pool.snapshot()[0]!.disabledReason).toBe(`Incorrect API key provided: ${REDACTED}`);
    const config = loadConfig({ env: {} });
    config.upstreams = [{ id: "up", kind: "openai", base_url: "http://127.0.0.1:9", accounts: [{ id: "a", api_key: KEY, weight: 1, max_concurrency: 1 }] } as (typeof config.upstreams)[number]];
    const view = storedStatus(config, { snapshots: new Map(), disabled: new Map([["up", await store.upstreams.disabledAccounts("up")]]) }, Date.now());
    expect(view[0]!.accounts[0]!.disabled_reason).toBe(`Incorrect API key provided: ${REDACTED}`);
  });
});

describe("answerStream: an answer redacted as it arrives in pieces", () => {
  const secret = "sk-stream-secret-0123456789abcdef";
  const redactor = new SecretRedactor([secret]);
  const streamed = (pieces: string[]) => {
    const s = redactor.answerStream();
    return pieces.map((p) => s.push(p)).join("") + s.end();
  };
  const splitAt = (text: string, cuts: number[]) => {
    const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
    return [0, ...at].map((from, i) => text.slice(from, at[i] ?? text.length));
  };

  test("a secret split across pieces (even one character each) is removed like a whole one", () => {
    const text = `key: ${secret}, part ${secret.slice(4, 14)} end`;
    expect(streamed([...text])).toBe(redactor.answer(text));
    expect(streamed([...text])).toBe(`key: ${REDACTED}, part ${REDACTED} end`);
  });

  test("any split of any text gives what answer() gives for the whole, with no fragment left", () => {
    const pieceOf = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom(secret, secret.slice(0, 9), secret.slice(-11), "😀", "é"));
    fc.assert(
      fc.property(fc.array(pieceOf, { maxLength: 12 }), fc.array(fc.nat(), { maxLength: 8 }), (parts, cuts) => {
        const text = parts.join("");
        const out = streamed(splitAt(text, cuts));
        expect(redactor.leaks(out)).toBe(false);
        expect(out).toBe(redactor.answer(text));
      }),
      { numRuns: 300 },
    );
  });

  test("a piece is held back only until FRAGMENT_CHARS - 1 characters follow it, and never splits a surrogate pair", () => {
    const s = redactor.answerStream();
    expect(s.push("hello")).toBe("");
    expect(s.push(" world")).toBe("hell");
    expect(s.push("😀abcdef")).toBe("o world");
    expect(s.end()).toBe("😀abcdef");
  });
});
