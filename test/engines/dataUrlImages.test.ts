/**
 * An upstream may answer its image inline as a data: URL where a download URL would be
 * (Replicate's sync mode: replicate.com/changelog/2024-10-09-synchronous-api). downloadImage
 * takes it without a request, within the download's size limit, and only a base64 image.
 */
import { expect, test } from "bun:test";
import { downloadImage } from "../../src/engines/upstreamHttp";
import { AttemptFailure } from "../../src/engines/pool";
import { SecretRedactor } from "../../src/engines/redact";
import { makePng, readPng } from "../support/images";

const png = makePng(12, 7, (x) => [x * 20, 40, 90, 255]);
const b64 = Buffer.from(png).toString("base64");
const get = (url: string, maxBytes = 64 * 1024) => downloadImage(url, { maxBytes, timeoutMs: 1000, signal: new AbortController().signal, redactor: new SecretRedactor([]) });

test("a data:image/…;base64 URL is the image's bytes", async () => {
  expect(readPng(await get(`data:image/png;base64,${b64}`))).toMatchObject({ width: 12, height: 7 });
});

test.each([
  ["not an image", `data:text/plain;base64,${b64}`, /not a base64 image/],
  ["not base64", `data:image/png,${encodeURIComponent("\x89PNG")}`, /not a base64 image/],
  ["base64 with characters it has not", `data:image/png;base64,${b64.slice(0, 20)}!$${b64.slice(20)}`, /not valid base64/],
  ["larger than the limit (told before decoding)", `data:image/png;base64,${Buffer.alloc(4096).toString("base64")}`, /exceeds the limit of 1024/],
  ["two bytes over the limit once decoded", `data:image/png;base64,${Buffer.alloc(1026).toString("base64")}`, /1026 bytes exceeds the limit of 1024/],
])("a data URL %s is a failed attempt", async (_, url, message) => {
  const err = await get(url, 1024).catch((e) => e);
  expect(err).toBeInstanceOf(AttemptFailure);
  expect(err).toMatchObject({ kind: "failed" });
  expect(err.message).toMatch(message);
});
