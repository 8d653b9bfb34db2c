/**
 * Big uploads through a real server (issue 15): JSON reference images decoded while the body
 * streams in, and a burst of bodies larger than the in-flight budget queued and served in turn,
 * not refused. Bad uploads are still 400 naming the field, before any charge.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { encodePng } from "../../src/core/image/codec";
import { startTestServer, type TestServer } from "../support/server";

const MiB = 1024 * 1024;
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({
    config: (c) => {
      // Room for one of the bodies below at a time: the others must wait for it.
      c.server.max_inflight_body_bytes = 3 * MiB;
      c.limits.per_user_concurrency = 4;
    },
  });
});
afterAll(() => server.stop());

/** A PNG of noise (it does not compress), about `mib` MiB. */
function noisePng(mib: number, seed: number): Uint8Array {
  const side = Math.floor(Math.sqrt((mib * MiB) / 4));
  const data = new Uint8Array(side * side * 4);
  let x = seed;
  for (let i = 0; i < data.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    data[i] = i % 4 === 3 ? 255 : x >>> 24;
  }
  return encodePng({ width: side, height: side, data });
}

const dataUrl = (bytes: Uint8Array) => `data:image/png;base64,${Buffer.from(bytes).toString("base64")}`;

describe("big uploads", () => {
  test("four bodies of about 2.3 MB against a 3 MiB in-flight budget (one at a time fits): all served in turn, none refused, each charged once", async () => {
    const u = await server.userWithKey({ credits: 10 });
    const references = [noisePng(1, 1), noisePng(1, 2)].map(dataUrl);
    const body = JSON.stringify({ prompt: "a harbour", size: "64x64", reference_images: references });
    expect(body.length).toBeGreaterThan(1.5 * MiB);
    const statuses = await Promise.all(
      Array.from({ length: 4 }, () =>
        fetch(`${server.url}/v1/images/generations`, {
          method: "POST",
          headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" },
          body,
        }).then(async (r) => (await r.arrayBuffer(), r.status)),
      ),
    );
    expect(statuses).toEqual([200, 200, 200, 200]);
    expect(await server.balance(u.userId)).toBe(6);
    expect(server.services.budget.inflightBytes).toBe(0);
    expect(server.services.budget.queued).toBe(0);
  });

  test("the official client's generation with reference images (decoded as they stream in, scaled down natively by the engine): 200, charged once", async () => {
    const u = await server.userWithKey({ credits: 2 });
    const client = new OpenAI({ apiKey: u.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const red = encodePng({ width: 300, height: 200, data: new Uint8Array(300 * 200 * 4).map((_, i) => (i % 4 === 0 || i % 4 === 3 ? 255 : 0)) });
    const res = await client.images.generate({ prompt: "a plain", size: "64x64" as "1024x1024", reference_images: [dataUrl(red), dataUrl(red)] } as never);
    expect(res.data?.[0]?.b64_json).toBeString();
    expect(await server.balance(u.userId)).toBe(1);
  });

  test("a damaged reference in a big body: 400 naming it, not charged; so is base64 cut by a stray character", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const good = noisePng(1, 3);
    const damaged = good.slice();
    damaged[Math.floor(damaged.length / 2)]! ^= 0xff;
    for (const [refs, code] of [
      [[dataUrl(good), dataUrl(damaged)], "invalid_image"],
      [[dataUrl(good), `${dataUrl(good).slice(0, 5000)}*${dataUrl(good).slice(5001)}`], "invalid_base64"],
    ] as const) {
      const res = await fetch(`${server.url}/v1/images/generations`, {
        method: "POST",
        headers: { authorization: `Bearer ${u.key}`, "content-type": "application/json" },
        body: JSON.stringify({ prompt: "x", size: "64x64", reference_images: refs }),
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { param: string; code: string } }).error).toMatchObject({ param: "reference_images[1]", code });
    }
    expect(await server.balance(u.userId)).toBe(1);
    expect(server.services.budget.inflightBytes).toBe(0);
  });
});
