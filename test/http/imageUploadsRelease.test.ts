/**
 * http/v1/images/parse releaseUploads: the images read from the request's own body (decoded
 * data URLs, multipart files) are given back once the flow is done with them; an image read
 * from elsewhere (the image store, a URL) is never touched, since others may hold its bytes.
 */
import { expect, test } from "bun:test";
import { DecodedDataUrl } from "../../src/core/imageInput";
import { fileToImage, imageFromSource, releaseUploads, type ImageSources } from "../../src/http/v1/images/parse";
import { makePng } from "../support/images";

/** A PNG of noise, large enough (over 64 KiB) to be released rather than left to the collector. */
const png = makePng(200, 200, (x, y) => [(x * 7919 + y * 104729) & 255, (x * y) & 255, (x ^ y) & 255, 255]);

test("uploads are released, an image from the image store is not", async () => {
  expect(png.byteLength).toBeGreaterThan(64 * 1024);
  const stored = new Uint8Array(png);
  const policy: ImageSources = { allowPrivateAddresses: false, timeoutMs: 1000, resolve: async () => [], ownLink: async () => ({ bytes: stored }) };
  const file = await fileToImage(new File([png], "a.png", { type: "image/png" }), "image[0]");
  const decoded = await imageFromSource(new DecodedDataUrl("png", new Uint8Array(png)), "images[1]", policy);
  const fromStore = await imageFromSource("http://localhost/files/images/x.png", "images[2]", policy);
  expect([file, decoded, fromStore].map((i) => i.bytes.byteLength)).toEqual([png.byteLength, png.byteLength, png.byteLength]);
  releaseUploads([file, decoded, fromStore, undefined]);
  expect(file.bytes.byteLength).toBe(0);
  expect(decoded.bytes.byteLength).toBe(0);
  expect(fromStore.bytes).toBe(stored);
  expect(stored.byteLength).toBe(png.byteLength);
});
