/**
 * A JSON request body read as it streams in, with its image data URLs decoded on the way:
 * everything but those data URLs is copied into a small JSON text, and the base64 of each
 * `data:image/<type>;base64,…` value in an upload field is decoded chunk by chunk, then kept in a
 * buffer of exactly the image's size. So a 118 MB body of ten images costs about the images' bytes,
 * not the body, its text, the parsed strings and the decoded copies all at once.
 *
 * The rules:
 * - Only string values at the paths the route names (uploadParam) are candidates; a candidate
 *   that does not start with a data URL head within DATA_URL_HEAD_CHARS stays a string.
 * - Base64 is strict, as for a data URL string (core/imageInput): the standard alphabet, padding
 *   only at the end, a length that is a multiple of 4, no whitespace and no escapes but `\/`
 *   (JSON encoders such as PHP's write every `/` so). A violation is a 400 naming the field, as
 *   soon as it arrives; so is an image past MAX_IMAGE_BYTES (the rest is never decoded).
 * - Memory: the base64 is decoded from the chunk's bytes straight into the image's buffer, with
 *   no string in between, and scanJsonBody releases each chunk once it is scanned (core/image/
 *   release); what stays is the images at their exact size and the small JSON text.
 * - The scanner only follows the nesting to know where it is; whether the text is JSON at all
 *   (and not nested too deeply) is for the parser of the text it returns (http/body).
 * Each decoded image stands in the text as a placeholder string carrying a per-request nonce,
 * so a client cannot forge one; the parser puts a DecodedDataUrl in its place.
 */
import { randomBytes } from "node:crypto";
import { DATA_URL, DATA_URL_HEAD_CHARS, DecodedDataUrl, invalidBase64, tooLargeAfterDecoding } from "../core/imageInput";
import { releaseBytes } from "../core/image/release";
import { MAX_IMAGE_BYTES, MAX_JSON_DEPTH } from "../core/limits";

/** Where a value sits: object keys and array indices from the top. */
export type JsonPath = readonly (string | number)[];

/** The request field an upload at this path is reported as (`reference_images[3]`), or null when the path takes no uploads. */
export type UploadParam = (path: JsonPath) => string | null;

export interface ScannedJson {
  /** The body's JSON text with every decoded data URL replaced by a placeholder string. */
  text: Uint8Array;
  /** Turns the placeholders back into the decoded images (a JSON.parse reviver). */
  revive: (key: string, value: unknown) => unknown;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Where `byte` first is in chunk[from, end), else -1: a search that stops at `end`. */
function indexOfBefore(chunk: Uint8Array, byte: number, from: number, end: number): number {
  const at = chunk.subarray(from, end).indexOf(byte);
  return at === -1 ? -1 : from + at;
}
const SLASH = 0x2f;
const COMMA = 0x2c;
const EQUALS = 0x3d;
/** Longer keys are kept out of the path (no upload field has one); the text still has them. */
const MAX_PATH_KEY_BYTES = 256;

interface Level {
  array: boolean;
  /** Objects: the key of the current member (null before the first, or when not tracked). */
  key: string | null;
  expectingKey: boolean;
  /** Arrays: the index of the current element. */
  index: number;
}

/** Marks a byte outside the base64 alphabet in the tables below: above any 24-bit group. */
const NOT_BASE64 = 1 << 24;

/**
 * For each of the four places in a group of base64 characters, every byte's 6-bit value shifted
 * to its place in the group's 24 bits, or NOT_BASE64 (`=`, `-`, `_`, whitespace, anything else).
 */
const [PLACE0, PLACE1, PLACE2, PLACE3] = [18, 12, 6, 0].map((shift) => {
  const table = new Uint32Array(256).fill(NOT_BASE64);
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (let i = 0; i < 64; i++) table[alphabet.charCodeAt(i)] = i << shift;
  return table;
}) as [Uint32Array, Uint32Array, Uint32Array, Uint32Array];

/**
 * Whole groups of 4 base64 characters (the last one padded with `padding` '=' characters)
 * decoded into `out` from `at`. False if any character is outside the standard alphabet (an
 * '=' before the padding included). Straight from bytes to bytes: the usual way, a latin1 string
 * of each chunk for Buffer's decoder, made a body's worth of strings that the collector freed
 * only long after, which was most of the request's peak memory (see README, Big uploads).
 */
function decodeBase64Groups(groups: Uint8Array, padding: number, out: Uint8Array, at: number): boolean {
  const whole = groups.length - (padding > 0 ? 4 : 0);
  let o = at;
  let seen = 0;
  for (let i = 0; i < whole; i += 4, o += 3) {
    const bits = PLACE0[groups[i]!]! | PLACE1[groups[i + 1]!]! | PLACE2[groups[i + 2]!]! | PLACE3[groups[i + 3]!]!;
    seen |= bits;
    out[o] = bits >>> 16;
    out[o + 1] = bits >>> 8;
    out[o + 2] = bits;
  }
  if (padding > 0) {
    const bits = PLACE0[groups[whole]!]! | PLACE1[groups[whole + 1]!]! | (padding === 1 ? PLACE2[groups[whole + 2]!]! : 0);
    seen |= bits;
    out[o] = bits >>> 16;
    if (padding === 1) out[o + 1] = bits >>> 8;
  }
  return (seen & NOT_BASE64) === 0;
}

/**
 * Decodes one data URL's base64 as it arrives, strictly, into `scratch` (a buffer of
 * MAX_IMAGE_BYTES that the scanner reuses for each of its images: decoding in place costs a
 * third of allocating a piece per chunk), then copies the image out at its exact size.
 */
class Base64Decoder {
  private decoded = 0;
  private chars = 0;
  private carry = new Uint8Array(4);
  private carried = 0;
  private padded = false;

  constructor(
    readonly param: string,
    private readonly scratch: Uint8Array,
  ) {}

  write(segment: Uint8Array): void {
    if (segment.length === 0) return;
    if (this.padded) throw invalidBase64(this.param);
    this.chars += segment.length;
    let at = 0;
    if (this.carried > 0) {
      const take = Math.min(4 - this.carried, segment.length);
      this.carry.set(segment.subarray(0, take), this.carried);
      this.carried += take;
      at = take;
      if (this.carried < 4) return;
      this.decodeQuads(this.carry);
      this.carried = 0;
    }
    const whole = (segment.length - at) & ~3;
    if (whole > 0) this.decodeQuads(segment.subarray(at, at + whole));
    const rest = segment.length - at - whole;
    if (rest > 0) {
      if (this.padded) throw invalidBase64(this.param);
      this.carry.set(segment.subarray(at + whole), 0);
      this.carried = rest;
    }
  }

  /** The image's bytes, in a buffer of their own and of exactly their size. */
  finish(): Uint8Array {
    if (this.chars === 0 || this.carried !== 0) throw invalidBase64(this.param);
    return new Uint8Array(this.scratch.subarray(0, this.decoded));
  }

  /** Whole groups of 4 characters; '=' padding ends the data URL (nothing may follow it). */
  private decodeQuads(quads: Uint8Array): void {
    if (this.padded) throw invalidBase64(this.param);
    const last = quads.length - 1;
    const padding = quads[last] !== EQUALS ? 0 : quads[last - 1] === EQUALS ? 2 : 1;
    if (padding > 0) this.padded = true;
    const expected = (quads.length / 4) * 3 - padding;
    if (this.decoded + expected > MAX_IMAGE_BYTES) throw tooLargeAfterDecoding(this.param);
    if (!decodeBase64Groups(quads, padding, this.scratch, this.decoded)) throw invalidBase64(this.param);
    this.decoded += expected;
  }
}

type Mode =
  /** Between strings: structure, numbers, literals, whitespace. */
  | { kind: "between" }
  /** Inside a string copied as it is (a key when `key` collects its bytes). */
  | { kind: "string"; escaped: boolean; key?: number[] }
  /** The first bytes of a candidate string, held back until they show a data URL head or not. */
  | { kind: "head"; param: string; raw: number[]; escaped: boolean }
  /** Inside a data URL's base64. */
  | { kind: "base64"; decoder: Base64Decoder; subtype: string; escaped: boolean };

export class JsonUploadScanner {
  private readonly text: Uint8Array[] = [];
  private textBytes = 0;
  private readonly levels: Level[] = [];
  private depth = 0;
  private mode: Mode = { kind: "between" };
  private readonly uploads: DecodedDataUrl[] = [];
  private readonly marker = `\u0000upload:${randomBytes(9).toString("base64")}:`;
  private scratch?: Uint8Array;

  constructor(private readonly uploadParam: UploadParam) {}

  /** Feeds the next chunk of the body. Throws the 400 for an upload that cannot be valid. */
  write(chunk: Uint8Array): void {
    let pos = 0;
    let copyFrom = 0;
    const n = chunk.length;
    while (pos < n) {
      const mode = this.mode;
      if (mode.kind === "between") {
        const c = chunk[pos]!;
        if (c === QUOTE) {
          const level = this.levels[this.depth - 1];
          if (level && !level.array && level.expectingKey) {
            this.mode = { kind: "string", escaped: false, key: [] };
          } else {
            const param = this.depth <= MAX_JSON_DEPTH ? this.uploadParam(this.path()) : null;
            if (param !== null) {
              this.copy(chunk.subarray(copyFrom, pos));
              this.mode = { kind: "head", param, raw: [QUOTE], escaped: false };
              copyFrom = pos + 1;
            } else {
              this.mode = { kind: "string", escaped: false };
            }
          }
        } else this.structure(c);
        pos++;
      } else if (mode.kind === "string") {
        pos = this.skipString(chunk, pos, mode);
      } else if (mode.kind === "head") {
        const c = chunk[pos++]!;
        copyFrom = pos;
        mode.raw.push(c);
        if (mode.escaped) mode.escaped = false;
        else if (c === BACKSLASH) mode.escaped = true;
        else if (c === QUOTE || c === COMMA || mode.raw.length > DATA_URL_HEAD_CHARS + 1) this.decideHead(mode);
      } else {
        pos = this.decodeBase64(chunk, pos, mode);
        if (this.mode.kind === "between") copyFrom = pos;
        else copyFrom = n;
      }
    }
    if (this.mode.kind === "between" || this.mode.kind === "string") this.copy(chunk.subarray(copyFrom, n));
  }

  /**
   * Gives back the buffer the images were decoded in (MAX_IMAGE_BYTES; the images were copied
   * out of it): once the body is scanned, or refused.
   */
  release(): void {
    releaseBytes(this.scratch);
    this.scratch = undefined;
  }

  /** The text to parse, once the whole body was written. */
  end(): ScannedJson {
    if (this.mode.kind === "head") this.copy(Uint8Array.from(this.mode.raw));
    const text = new Uint8Array(this.textBytes);
    let at = 0;
    for (const piece of this.text) {
      text.set(piece, at);
      at += piece.length;
    }
    const { marker, uploads } = this;
    return {
      text,
      revive: (_key, value) => (typeof value === "string" && value.startsWith(marker) ? (uploads[Number(value.slice(marker.length))] ?? value) : value),
    };
  }

  private copy(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    // A copy: the chunk's buffer is Bun's and may be reused or be far larger than this part.
    this.text.push(bytes.slice());
    this.textBytes += bytes.length;
  }

  private path(): (string | number)[] {
    return this.levels.map((l) => (l.array ? l.index : (l.key ?? "")));
  }

  private structure(c: number): void {
    const level = this.depth <= MAX_JSON_DEPTH ? this.levels[this.depth - 1] : undefined;
    switch (c) {
      case 0x7b: // {
      case 0x5b: // [
        this.depth++;
        if (this.depth <= MAX_JSON_DEPTH) this.levels.push({ array: c === 0x5b, key: null, expectingKey: c === 0x7b, index: 0 });
        break;
      case 0x7d: // }
      case 0x5d: // ]
        if (this.depth > 0 && this.depth <= MAX_JSON_DEPTH) this.levels.pop();
        this.depth = Math.max(0, this.depth - 1);
        break;
      case COMMA:
        if (level?.array) level.index++;
        else if (level) level.expectingKey = true;
        break;
      case 0x3a: // :
        if (level && !level.array) level.expectingKey = false;
        break;
    }
  }

  /** Inside a copied string: to its closing quote (escapes skipped) or the chunk's end. */
  private skipString(chunk: Uint8Array, from: number, mode: Extract<Mode, { kind: "string" }>): number {
    let pos = from;
    while (pos < chunk.length) {
      if (mode.escaped) {
        mode.escaped = false;
        this.keyByte(mode, chunk[pos]!);
        pos++;
        continue;
      }
      // The backslash is looked for only before the quote: searched to the chunk's end, every
      // short string of a chunk without one (`["","",…]`) scanned the rest of the chunk again.
      const quote = chunk.indexOf(QUOTE, pos);
      const backslash = indexOfBefore(chunk, BACKSLASH, pos, quote === -1 ? chunk.length : quote);
      const stop = backslash !== -1 ? backslash : quote;
      const end = stop === -1 ? chunk.length : stop;
      if (mode.key) for (let i = pos; i < end && mode.key.length <= MAX_PATH_KEY_BYTES; i++) mode.key.push(chunk[i]!);
      if (stop === -1) return chunk.length;
      if (stop === backslash) {
        this.keyByte(mode, BACKSLASH);
        mode.escaped = true;
        pos = stop + 1;
        continue;
      }
      if (mode.key) this.keyEnded(mode.key);
      this.mode = { kind: "between" };
      return stop + 1;
    }
    return pos;
  }

  private keyByte(mode: Extract<Mode, { kind: "string" }>, c: number): void {
    if (mode.key && mode.key.length <= MAX_PATH_KEY_BYTES) mode.key.push(c);
  }

  private keyEnded(raw: number[]): void {
    const level = this.levels[this.depth - 1];
    if (!level || this.depth > MAX_JSON_DEPTH) return;
    level.key = null;
    if (raw.length > MAX_PATH_KEY_BYTES) return;
    try {
      level.key = JSON.parse(`"${Buffer.from(raw).toString("utf8")}"`) as string;
    } catch {
      // Not a valid JSON string: the parser of the text refuses the body.
    }
  }

  /** The candidate's first bytes are in: a data URL head starts decoding, anything else is copied as a string. */
  private decideHead(mode: Extract<Mode, { kind: "head" }>): void {
    // The raw bytes without the opening quote, with `\/` unescaped (the only escape a head may have).
    const head = Buffer.from(mode.raw.slice(1)).toString("latin1").replaceAll("\\/", "/");
    const match = DATA_URL.exec(head);
    if (match && match[0].length === head.length && !head.includes("\\")) {
      // Unsafe (not zero-filled): only the pages an image is decoded into become resident.
      this.scratch ??= Buffer.allocUnsafe(MAX_IMAGE_BYTES);
      this.mode = { kind: "base64", decoder: new Base64Decoder(mode.param, this.scratch), subtype: match[1]!, escaped: false };
      return;
    }
    this.copy(Uint8Array.from(mode.raw));
    // Decided on an unescaped quote: the head was the whole string.
    this.mode = mode.raw.length > 1 && mode.raw[mode.raw.length - 1] === QUOTE ? { kind: "between" } : { kind: "string", escaped: false };
  }

  /** Inside base64: decodes up to the closing quote (then the placeholder goes into the text) or the chunk's end. */
  private decodeBase64(chunk: Uint8Array, from: number, mode: Extract<Mode, { kind: "base64" }>): number {
    let pos = from;
    while (pos < chunk.length) {
      if (mode.escaped) {
        if (chunk[pos] !== SLASH) throw invalidBase64(mode.decoder.param);
        mode.escaped = false;
        mode.decoder.write(SLASH_BYTE);
        pos++;
        continue;
      }
      const quote = chunk.indexOf(QUOTE, pos);
      const scanEnd = quote === -1 ? chunk.length : quote;
      const backslash = indexOfBefore(chunk, BACKSLASH, pos, scanEnd);
      const stop = backslash !== -1 ? backslash : scanEnd;
      mode.decoder.write(chunk.subarray(pos, stop));
      if (stop === chunk.length) return stop;
      if (backslash !== -1) {
        mode.escaped = true;
        pos = stop + 1;
        continue;
      }
      const index = this.uploads.push(new DecodedDataUrl(mode.subtype, mode.decoder.finish())) - 1;
      this.copy(new TextEncoder().encode(JSON.stringify(`${this.marker}${index}`)));
      this.mode = { kind: "between" };
      return stop + 1;
    }
    return pos;
  }
}

const SLASH_BYTE = Uint8Array.of(SLASH);

/**
 * Reads a request's JSON body to its end through a JsonUploadScanner. On a refusal the body is
 * cancelled (the server closes the connection, as for any body left unread).
 * The chunks are the scanner's: each is released once scanned (core/image/release), since
 * everything the scanner keeps it has copied. That holds for a request body, whose every read
 * Bun answers with a buffer of its own; a stream that hands out a buffer it still uses must not
 * be given here.
 */
export async function scanJsonBody(body: ReadableStream<Uint8Array>, uploadParam: UploadParam): Promise<ScannedJson> {
  const scanner = new JsonUploadScanner(uploadParam);
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return scanner.end();
      scanner.write(value);
      releaseBytes(value);
    }
  } catch (e) {
    reader.cancel().catch(() => {});
    throw e;
  } finally {
    scanner.release();
    reader.releaseLock();
  }
}

/** A JSON body already read whole (a small one) through a JsonUploadScanner. */
export function scanJsonBytes(bytes: Uint8Array, uploadParam: UploadParam): ScannedJson {
  const scanner = new JsonUploadScanner(uploadParam);
  try {
    scanner.write(bytes);
    return scanner.end();
  } finally {
    scanner.release();
  }
}
