/**
 * The streaming JSON reader of image requests (http/jsonUploads): whatever way the body is cut
 * into chunks, it gives the same value JSON.parse would, with every data URL in an upload field
 * decoded exactly as the strict string decoder (core/imageInput) decodes it, and refused where
 * that one refuses.
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { DecodedDataUrl, ImageInputError } from "../../src/core/imageInput";
import { MAX_IMAGE_BYTES } from "../../src/core/limits";
import { JsonUploadScanner, scanJsonBody, type UploadParam } from "../../src/http/jsonUploads";
import { parseJsonBody } from "../../src/http/body";
import { editUploads, generationUploads } from "../../src/http/v1/images/parse";

/** The body cut at the given offsets (sorted, deduplicated), fed chunk by chunk. */
function scan(text: string | Uint8Array, cuts: number[], uploads: UploadParam = generationUploads): unknown {
  const bytes = typeof text === "string" ? new TextEncoder().encode(text) : text;
  const scanner = new JsonUploadScanner(uploads);
  let from = 0;
  for (const cut of [...new Set(cuts.map((c) => Math.min(c, bytes.length)))].sort((a, b) => a - b)) {
    scanner.write(bytes.slice(from, cut));
    from = cut;
  }
  scanner.write(bytes.slice(from));
  const scanned = scanner.end();
  return parseJsonBody(scanned.text, scanned.revive);
}

function refusal(f: () => unknown): { param: string; reason: string } | null {
  try {
    f();
    return null;
  } catch (e) {
    if (!(e instanceof ImageInputError)) throw e;
    return { param: e.param, reason: e.reason };
  }
}

/** The strict string decoder's verdict on a data URL's base64 (the rule before streaming). */
function strictDecode(b64: string): Uint8Array | "invalid_base64" {
  if (b64.length === 0 || b64.length % 4 !== 0 || b64.includes("-") || b64.includes("_")) return "invalid_base64";
  const padding = b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0;
  const bytes = Buffer.from(b64, "base64");
  return bytes.length === (b64.length / 4) * 3 - padding ? new Uint8Array(bytes) : "invalid_base64";
}

const cuts = fc.array(fc.nat({ max: 400 }), { maxLength: 12 });

describe("valid bodies", () => {
  test("any bytes as reference images, any chunking: the same value as JSON.parse, images decoded to exactly their bytes", () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ minLength: 1, maxLength: 120 }), { minLength: 1, maxLength: 4 }), fc.string({ maxLength: 30 }), cuts, (images, prompt, at) => {
        const body = { prompt, size: "64x64", reference_images: images.map((b) => `data:image/png;base64,${Buffer.from(b).toString("base64")}`), n: 1 };
        const value = scan(JSON.stringify(body), at) as Omit<typeof body, "reference_images"> & { reference_images: DecodedDataUrl[] };
        expect(value.prompt).toBe(prompt);
        expect(value.size).toBe("64x64");
        expect(value.n).toBe(1);
        expect(value.reference_images).toHaveLength(images.length);
        for (const [i, img] of value.reference_images.entries()) {
          expect(img).toBeInstanceOf(DecodedDataUrl);
          expect(img.subtype).toBe("png");
          expect([...img.bytes]).toEqual([...images[i]!]);
          // Exact size, a buffer of its own.
          expect(img.bytes.buffer.byteLength).toBe(images[i]!.length);
        }
      }),
      { numRuns: 300 },
    );
  });

  test("arbitrary JSON around the upload fields comes through unchanged, escapes and unicode included", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), cuts, (extra, at) => {
        const body = { extra, "key \"quoted\" \\ é": extra, reference_image: "data:image/webp;base64,AAAA" };
        const value = scan(JSON.stringify(body), at) as Record<string, unknown>;
        expect(value.extra).toEqual(JSON.parse(JSON.stringify(extra)));
        expect(value["key \"quoted\" \\ é"]).toEqual(JSON.parse(JSON.stringify(extra)));
        expect(value.reference_image).toBeInstanceOf(DecodedDataUrl);
      }),
      { numRuns: 200 },
    );
  });

  test("data URLs outside the upload fields, and other strings in them, stay strings", () => {
    const url = "data:image/png;base64,AAAA";
    const body = { prompt: url, user: [url], reference_images: ["https://example.com/a.png", "data:text/plain;base64,AAAA", "x\"y", url], nested: { reference_image: url } };
    const value = scan(JSON.stringify(body), [3, 40, 41, 90]) as Record<string, unknown>;
    expect(value.prompt).toBe(url);
    expect(value.user).toEqual([url]);
    expect(value.nested).toEqual({ reference_image: url });
    const refs = value.reference_images as unknown[];
    expect(refs.slice(0, 3)).toEqual(["https://example.com/a.png", "data:text/plain;base64,AAAA", "x\"y"]);
    expect(refs[3]).toBeInstanceOf(DecodedDataUrl);
  });

  test("the JSON edit form: images[i].image_url and mask.image_url, reported with their params", () => {
    const body = { prompt: "x", images: [{ image_url: "data:image/png;base64,AAAA" }, { image_url: "data:image/png;base64,%%%%" }] };
    expect(refusal(() => scan(JSON.stringify(body), [], editUploads))).toEqual({ param: "images[1]", reason: "invalid_base64" });
    const mask = { prompt: "x", images: [{ image_url: "data:image/png;base64,AAAA" }], mask: { image_url: "data:image/png;base64,AAA" } };
    expect(refusal(() => scan(JSON.stringify(mask), [], editUploads))).toEqual({ param: "mask", reason: "invalid_base64" });
  });

  test("`\\/` escapes (PHP's json_encode writes every slash so) in the head and the base64", () => {
    const bytes = Uint8Array.from({ length: 300 }, (_, i) => (i * 37) & 255);
    const b64 = Buffer.from(bytes).toString("base64");
    expect(b64).toContain("/");
    const text = `{"prompt":"x","reference_image":"data:image\\/jpeg;base64,${b64.replaceAll("/", "\\/")}"}`;
    for (const at of [[], [31, 32, 33], [40, 41, 42, 43, 44]]) {
      const value = scan(text, at) as { reference_image: DecodedDataUrl };
      expect(value.reference_image.subtype).toBe("jpeg");
      expect([...value.reference_image.bytes]).toEqual([...bytes]);
    }
  });

  test("a client cannot forge the placeholder of a decoded image", () => {
    const value = scan(JSON.stringify({ prompt: "\u0000upload:AAAAAAAAAAAA:0", reference_image: "data:image/png;base64,AAAA" }), []) as Record<string, unknown>;
    expect(value.prompt).toBe("\u0000upload:AAAAAAAAAAAA:0");
  });
});

describe("strict base64, as strict as the string decoder", () => {
  test("any base64-like text, any chunking: decoded to the same bytes, or refused as invalid_base64 naming the field, exactly when the string decoder refuses", () => {
    const chars = fc.constantFrom(..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".split(""), "=", "-", "_", " ", "%", "\n", "é");
    fc.assert(
      fc.property(fc.array(chars, { maxLength: 40 }).map((c) => c.join("")), cuts, (b64, at) => {
        const expected = strictDecode(b64);
        const text = JSON.stringify({ prompt: "x", reference_images: ["data:image/png;base64,AAAA", `data:image/png;base64,${b64}`] });
        const got = refusal(() => scan(text, at));
        if (expected === "invalid_base64") {
          expect(got).toEqual({ param: "reference_images[1]", reason: "invalid_base64" });
        } else {
          expect(got).toBeNull();
          const value = scan(text, at) as { reference_images: DecodedDataUrl[] };
          expect([...value.reference_images[1]!.bytes]).toEqual([...expected]);
        }
      }),
      { numRuns: 1000 },
    );
  });

  test("escapes other than \\/ are refused inside base64", () => {
    expect(refusal(() => scan('{"reference_image":"data:image/png;base64,AA\\nAA"}', []))).toEqual({ param: "reference_image", reason: "invalid_base64" });
    expect(refusal(() => scan('{"reference_image":"data:image/png;base64,AA\\u0041A"}', [44]))).toEqual({ param: "reference_image", reason: "invalid_base64" });
  });
});

describe("bounded", () => {
  test("an image over 10 MiB is refused as soon as its decoded size passes the limit; the rest of the body is never read", async () => {
    const head = new TextEncoder().encode('{"prompt":"x","reference_image":"data:image/png;base64,');
    const chunk = new TextEncoder().encode("A".repeat(1024 * 1024));
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(head);
      },
      pull(c) {
        sent += chunk.length;
        if (sent > 100 * 1024 * 1024) c.close();
        // A buffer of its own each time, as a request body's reads are: the scanner releases each chunk.
        else c.enqueue(chunk.slice());
      },
    });
    const err = await scanJsonBody(body, generationUploads).then(
      () => null,
      (e) => e,
    );
    expect(err).toBeInstanceOf(ImageInputError);
    expect(err).toMatchObject({ param: "reference_image", reason: "image_too_large" });
    // 10 MiB decoded is about 13.3 MiB of base64: it stopped there, not at 100 MiB.
    expect(sent).toBeLessThan(Math.ceil((MAX_IMAGE_BYTES * 4) / 3) + 3 * chunk.length);
  });

  test("each chunk of the body is released once scanned, the images decoded from it intact", async () => {
    const image = Uint8Array.from({ length: 3 * 1024 * 1024 + 1 }, (_, i) => (i * 7919) >>> 3);
    const text = new TextEncoder().encode(JSON.stringify({ prompt: "x", reference_images: [`data:image/png;base64,${Buffer.from(image).toString("base64")}`] }));
    const chunks: Uint8Array[] = [];
    for (let at = 0; at < text.length; at += 100_003) chunks.push(text.slice(at, at + 100_003));
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (const chunk of chunks) c.enqueue(chunk);
        c.close();
      },
    });
    const scanned = await scanJsonBody(body, generationUploads);
    const value = parseJsonBody(scanned.text, scanned.revive) as { reference_images: DecodedDataUrl[] };
    expect(Buffer.compare(value.reference_images[0]!.bytes, image)).toBe(0);
    expect(value.reference_images[0]!.bytes.buffer.byteLength).toBe(image.length);
    // Every chunk but the last (under 64 KiB, left to the collector) was given back.
    expect(chunks.slice(0, -1).every((c) => c.byteLength === 0)).toBe(true);
  });

  test("an image of exactly 10 MiB is accepted", () => {
    const b64 = Buffer.alloc(MAX_IMAGE_BYTES, 7).toString("base64");
    const value = scan(`{"reference_image":"data:image/png;base64,${b64}"}`, [100_000, 5_000_001]) as { reference_image: DecodedDataUrl };
    expect(value.reference_image.bytes.length).toBe(MAX_IMAGE_BYTES);
  });

  test("deeply nested and malformed bodies still reach the JSON parser's refusals (400 invalid_json)", () => {
    const deep = `{"a":${"[".repeat(5000)}${"]".repeat(5000)},"reference_image":"data:image/png;base64,AAAA"}`;
    expect(() => scan(deep, [7, 2000])).toThrow(/nested more than/);
    expect(() => scan('{"prompt":"x","reference_image":"data:image/png;base64,AAAA"', [10])).toThrow(/could not parse/);
    expect(() => scan('{"prompt":"x","reference_image":"data:image/png;base6', [])).toThrow(/could not parse/);
  });
});
