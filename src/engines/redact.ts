/**
 * The one owner of what an upstream may say back to us: every string that comes from an
 * upstream (answers, error bodies, transport errors) passes through a SecretRedactor before we
 * return, store or log it.
 *
 * The rule: no substring of FRAGMENT_CHARS (8) or more characters of any configured secret
 * appears in the output. A secret is an account's api_key or password, in the spellings an
 * upstream can echo it in: raw, JSON-escaped, URL-encoded, and the Basic credential
 * (base64 of "username:password"). A whole secret shorter than 8 characters (but at least
 * MIN_SECRET_CHARS) is removed too; shorter fragments of it are not, as they say too little.
 *
 * How: every 8-character window of every secret goes into an index (fragmentIndex.ts); the text
 * is scanned once, and every position whose 8 characters are a window marks those 8 characters.
 * Each maximal run of marked characters becomes one REDACTED marker. A longer fragment is a chain of overlapping
 * windows, so it is marked whole, wherever it starts or ends, including a fragment an upstream
 * or a byte limit already cut at the edge of the text.
 *
 * Cutting comes after redaction, never before: a cut of clean text is clean, whereas a cut
 * first can split a secret so that no whole-secret match finds the half that stays.
 */

import { accountSecrets, type AccountCredentials } from "./credentials";
import { FragmentIndex } from "./fragmentIndex";

export const FRAGMENT_CHARS = 8;
/** A whole secret shorter than this is not looked for (it would match ordinary words). */
export const MIN_SECRET_CHARS = 4;
export const REDACTED = "[redacted]";
/** The default cut of an upstream's error text in our messages. */
export const MAX_UPSTREAM_MESSAGE_CHARS = 500;

/**
 * Credential-looking tokens that are no configured secret (another key the upstream mentions,
 * an Authorization header it echoes). `sk-` needs no word boundary: `xsk-…`, `id_sk-…` and
 * `key=sk-…` are all keys. Only for diagnostic text, not for answers (see `answer`).
 */
const CREDENTIAL_PATTERNS: [RegExp, string][] = [
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi, `$1 ${REDACTED}`],
  [/sk-[A-Za-z0-9_-]{8,}/g, `sk-${REDACTED}`],
];

/** See SecretRedactor.answerStream. */
export interface AnswerStream {
  /** The next piece of the answer; returns the part of the text so far that is final, redacted. */
  push(piece: string): string;
  /** The rest, redacted. */
  end(): string;
}

export class SecretRedactor {
  /** Every FRAGMENT_CHARS-long window of every long enough secret spelling. */
  private readonly windows: FragmentIndex;
  /** Secret spellings shorter than a window, looked for whole. */
  private readonly shortSecrets: string[] = [];

  constructor(secrets: Iterable<string | undefined>) {
    const spellings = new Set<string>();
    for (const s of secrets) {
      if (!s || s.length < MIN_SECRET_CHARS) continue;
      spellings.add(s);
      spellings.add(JSON.stringify(s).slice(1, -1));
      spellings.add(encodeURIComponent(s));
    }
    const windows: string[] = [];
    for (const s of spellings) {
      if (s.length < FRAGMENT_CHARS) {
        this.shortSecrets.push(s);
        continue;
      }
      for (let i = 0; i + FRAGMENT_CHARS <= s.length; i++) windows.push(s.slice(i, i + FRAGMENT_CHARS));
    }
    this.windows = new FragmentIndex(windows, FRAGMENT_CHARS);
  }

  /** Every account secret of every upstream ([[upstreams]] in the config). */
  static forUpstreams(upstreams: Iterable<{ accounts: AccountCredentials[] }>): SecretRedactor {
    return SecretRedactor.forAccounts([...upstreams].flatMap((u) => u.accounts));
  }

  /** The secrets of these accounts: keys, passwords and the Basic credential they make (see credentials.ts). */
  static forAccounts(accounts: Iterable<AccountCredentials>): SecretRedactor {
    return new SecretRedactor([...accounts].flatMap(accountSecrets));
  }

  /**
   * Text of a successful answer (a revised prompt, chat content): the configured secrets are
   * removed and nothing else changes, since guessing at "key-looking" words would corrupt
   * content the client asked for.
   */
  answer(text: string): string {
    // Clean text (nearly every answer) is looked at once, not once to strip and again to settle.
    if (!this.leaks(text)) return text;
    return this.settle(this.strip(text));
  }

  /**
   * Diagnostic text (an error body, a transport error): the configured secrets and
   * credential-looking tokens are removed from the whole text, then it is cut to `maxChars`
   * (UTF-16 units, an ellipsis included) without splitting a character or a marker.
   */
  message(text: string, maxChars = Number.POSITIVE_INFINITY): string {
    let out = this.strip(text);
    for (const [pattern, replacement] of CREDENTIAL_PATTERNS) out = out.replace(pattern, replacement);
    return this.cut(this.settle(out), maxChars);
  }

  /**
   * The redaction of an answer that arrives in pieces (a streamed chat reply or a tool call's
   * arguments): `push` each piece and pass on what it returns, then pass on `end()`. A
   * character is passed on only once the FRAGMENT_CHARS - 1 characters after it are known (no
   * window can mark it after that), and is marked with the characters before it in view, so a
   * secret split across pieces is removed like a whole one: one marker per run, as in `answer`.
   */
  answerStream(): AnswerStream {
    const hold = FRAGMENT_CHARS - 1;
    // The last `hold` characters already passed on (their windows reach into new text), and the rest not yet passed on.
    let seen = "";
    let pending = "";
    let inMarkedRun = false;
    const release = (all: boolean): string => {
      const text = seen + pending;
      let cut = all ? text.length : text.length - hold;
      // Never half a surrogate pair in a piece.
      const code = text.charCodeAt(cut - 1);
      if (!all && code >= 0xd800 && code <= 0xdbff) cut--;
      if (cut <= seen.length) return "";
      const marked = this.marks(text);
      let out = "";
      for (let i = seen.length; i < cut; ) {
        if (marked?.[i]) {
          if (!inMarkedRun) out += REDACTED;
          inMarkedRun = true;
          while (i < cut && marked[i]) i++;
        } else {
          const start = i;
          while (i < cut && !marked?.[i]) i++;
          out += text.slice(start, i);
          inMarkedRun = false;
        }
      }
      seen = text.slice(Math.max(0, cut - hold), cut);
      pending = text.slice(cut);
      // As in `settle`: a marker beside kept text that forms a fragment is never passed on.
      return this.leaks(out) ? "" : out;
    };
    return {
      push: (piece) => {
        pending += piece;
        return release(false);
      },
      end: () => release(true),
    };
  }

  /** True when `text` holds a fragment the rule forbids. */
  leaks(text: string): boolean {
    return this.marks(text) !== null;
  }

  /** The text with every forbidden fragment replaced by one marker per run. */
  private strip(text: string): string {
    const marked = this.marks(text);
    if (!marked) return text;
    let out = "";
    let i = 0;
    while (i < text.length) {
      if (!marked[i]) {
        const start = i;
        while (i < text.length && !marked[i]) i++;
        out += text.slice(start, i);
      } else {
        while (i < text.length && marked[i]) i++;
        out += REDACTED;
      }
    }
    return out;
  }

  /**
   * A marker or a pattern's replacement next to kept text could only form a new fragment if a
   * secret contained part of the marker itself; strip again until clean, and give up on the
   * text entirely rather than return a fragment.
   */
  private settle(text: string): string {
    let out = text;
    for (let round = 0; round < 3; round++) {
      if (!this.leaks(out)) return out;
      out = this.strip(out);
    }
    return this.leaks(out) ? "" : out;
  }

  /** Which characters of `text` belong to a forbidden fragment; null when none do. */
  private marks(text: string): Uint8Array | null {
    let marked: Uint8Array | null = null;
    this.windows.forEachMatch(text, (at) => {
      marked ??= new Uint8Array(text.length);
      marked.fill(1, at, at + FRAGMENT_CHARS);
    });
    for (const s of this.shortSecrets) {
      for (let at = text.indexOf(s); at >= 0; at = text.indexOf(s, at + 1)) {
        marked ??= new Uint8Array(text.length);
        marked.fill(1, at, at + s.length);
      }
    }
    return marked;
  }

  /** Clean text cut to `maxChars`; a cut of clean text only loses characters, so it stays clean. */
  private cut(text: string, maxChars: number): string {
    if (text.length <= maxChars) return text;
    if (maxChars < 1) return "";
    let end = maxChars - 1; // room for the ellipsis
    const code = text.charCodeAt(end - 1);
    if (code >= 0xd800 && code <= 0xdbff) end--; // never half a surrogate pair
    // Never half a marker: "[reda…" would read as if the text said so.
    const marker = text.lastIndexOf(REDACTED, end - 1);
    if (marker >= 0 && marker + REDACTED.length > end) end = marker;
    const withEllipsis = `${text.slice(0, end)}…`;
    return this.leaks(withEllipsis) ? text.slice(0, end) : withEllipsis;
  }
}
