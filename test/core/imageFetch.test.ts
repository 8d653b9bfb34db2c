/**
 * Image references by URL (core/imageFetch) with a scripted resolver and HTTP client: no DNS, no
 * sockets. Every hop resolved once, every address checked (redirects too), the request pinned to
 * the checked address, at most 3 redirects, the byte cap, the time limit, and every failure an
 * ImageInputError naming the field.
 */
import { describe, expect, test } from "bun:test";
import { fetchImage, isImageUrl, type ImageFetchPolicy } from "../../src/core/imageFetch";
import { ImageInputError } from "../../src/core/imageInput";
import { MAX_IMAGE_BYTES } from "../../src/core/limits";
import type { ResolveHost } from "../../src/core/pinnedFetch";
import { makePng } from "../support/images";

const PNG = makePng(8, 4);

type Script = (url: string, init: BunFetchRequestInit) => Response | Promise<Response>;

function client(script: Script) {
  const calls: { url: string; host: string | undefined; serverName: string | undefined; redirect: string | undefined }[] = [];
  const fetch = async (url: string, init: BunFetchRequestInit) => {
    calls.push({ url, host: (init.headers as Record<string, string>).host, serverName: init.tls?.serverName, redirect: init.redirect });
    return script(url, init);
  };
  return { fetch, calls };
}

function resolver(table: Record<string, string[]>): ResolveHost & { calls: string[] } {
  const calls: string[] = [];
  const fn = async (host: string) => {
    calls.push(host);
    const found = table[host];
    if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
    return found;
  };
  return Object.assign(fn, { calls });
}

const PUBLIC = { "images.example": ["93.184.216.34"], "cdn.example": ["151.101.1.1"], "rebind.example": ["127.0.0.1"], "mixed.example": ["93.184.216.34", "10.0.0.7"] };

function policy(script: Script, extra: Partial<ImageFetchPolicy> = {}) {
  const c = client(script);
  const resolve = resolver(PUBLIC);
  return { policy: { allowPrivateAddresses: false, timeoutMs: 2_000, resolve, fetch: c.fetch, ...extra }, calls: c.calls, resolve };
}

const image = () => new Response(PNG, { headers: { "content-type": "image/png" } });

async function failure(work: Promise<unknown>): Promise<ImageInputError> {
  try {
    await work;
  } catch (e) {
    expect(e).toBeInstanceOf(ImageInputError);
    return e as ImageInputError;
  }
  throw new Error("expected a failure");
}

describe("isImageUrl", () => {
  test("http(s) in any case, nothing else", () => {
    expect(isImageUrl("https://a.example/x.png")).toBe(true);
    expect(isImageUrl("HTTP://a.example/x.png")).toBe(true);
    for (const v of ["data:image/png;base64,AAAA", "ftp://a.example/x", "//a.example/x", "https:/a", 5, null]) expect(isImageUrl(v)).toBe(false);
  });
});

describe("fetchImage", () => {
  test("an image is fetched from the checked address with the original Host and TLS name, and sniffed", async () => {
    const { policy: p, calls, resolve } = policy(() => image());
    const got = await fetchImage("https://images.example:8443/a/b.png?x=1#frag", "reference_images[1]", p);
    expect([got.mime, got.width, got.height, got.param]).toEqual(["image/png", 8, 4, "reference_images[1]"]);
    expect(calls).toEqual([{ url: "https://93.184.216.34:8443/a/b.png?x=1", host: "images.example:8443", serverName: "images.example", redirect: "manual" }]);
    expect(resolve.calls).toEqual(["images.example"]);
  });

  test("URL syntax: http(s) only, no credentials", async () => {
    const { policy: p, calls } = policy(() => image());
    for (const [url, words] of [
      ["https://user:pw@images.example/a.png", "user name or password"],
      ["http://:80/", "not a valid"],
      [`https://images.example/${"a".repeat(9000)}`, "more than 8192"],
    ] as const) {
      const e = await failure(fetchImage(url, "reference_image", p));
      expect([e.param, e.reason]).toEqual(["reference_image", "image_url_refused"]);
      expect(e.message).toContain(words);
    }
    expect(calls).toHaveLength(0);
  });

  test("loopback, private, link-local and metadata addresses are refused before any request", async () => {
    const { policy: p, calls } = policy(() => image());
    for (const [url, label] of [
      ["http://127.0.0.1:9/x", "127.0.0.1 is a loopback address"],
      ["http://10.0.0.1/x", "10.0.0.1 is a private address"],
      ["http://169.254.169.254/latest/meta-data", "169.254.169.254 is a link-local address"],
      ["http://[::1]/x", "::1 is a loopback address"],
      ["http://[::ffff:127.0.0.1]/x", "IPv4-mapped loopback"],
      ["http://2130706433/x", "127.0.0.1 is a loopback address"],
      ["http://rebind.example/x", "rebind.example resolves to 127.0.0.1, which is a loopback address"],
      ["http://mixed.example/x", "mixed.example resolves to 10.0.0.7, which is a private address"],
    ] as const) {
      const e = await failure(fetchImage(url, "images[0]", p));
      expect([e.param, e.reason]).toEqual(["images[0]", "image_url_refused"]);
      expect(e.message).toContain(label);
    }
    expect(calls).toHaveLength(0);
  });

  test("allow_private lets private addresses through, still pinned", async () => {
    const { policy: p, calls } = policy(() => image(), { allowPrivateAddresses: true });
    await fetchImage("http://rebind.example:3000/x", "mask", p);
    expect(calls[0]).toMatchObject({ url: "http://127.0.0.1:3000/x", host: "rebind.example:3000", serverName: undefined });
  });

  test("every redirect is checked again: a public host redirecting to loopback or metadata is refused", async () => {
    for (const location of ["http://127.0.0.1/secret", "http://rebind.example/secret", "http://169.254.169.254/latest/meta-data", "ftp://images.example/x"]) {
      const { policy: p, calls } = policy(() => new Response(null, { status: 302, headers: { location } }));
      const e = await failure(fetchImage("https://images.example/a.png", "reference_image", p));
      expect(e.reason).toBe("image_url_refused");
      expect(calls).toHaveLength(1);
    }
  });

  test("relative redirects resolve against the hop, each hop resolved and pinned; the 4th redirect is refused", async () => {
    const { policy: p, calls, resolve } = policy((url) => {
      if (url === "https://93.184.216.34/a.png") return new Response(null, { status: 301, headers: { location: "/b.png" } });
      if (url === "https://93.184.216.34/b.png") return new Response(null, { status: 302, headers: { location: "https://cdn.example/c.png" } });
      if (url === "https://151.101.1.1/c.png") return new Response(null, { status: 307, headers: { location: "d.png" } });
      if (url === "https://151.101.1.1/d.png") return image();
      return new Response("no", { status: 404 });
    });
    const got = await fetchImage("https://images.example/a.png", "reference_image", p);
    expect(got.width).toBe(8);
    expect(calls.map((c) => [c.url, c.host])).toEqual([
      ["https://93.184.216.34/a.png", "images.example"],
      ["https://93.184.216.34/b.png", "images.example"],
      ["https://151.101.1.1/c.png", "cdn.example"],
      ["https://151.101.1.1/d.png", "cdn.example"],
    ]);
    expect(resolve.calls).toEqual(["images.example", "images.example", "cdn.example", "cdn.example"]);

    let n = 0;
    const loop = policy(() => new Response(null, { status: 302, headers: { location: `/r${++n}` } }));
    const e = await failure(fetchImage("https://images.example/r0", "reference_image", loop.policy));
    expect(e.reason).toBe("image_fetch_failed");
    expect(e.message).toContain("more than 3 redirects");
    expect(loop.calls).toHaveLength(4);
  });

  test("HTTP errors, unresolvable names and broken connections fail naming the field", async () => {
    const notFound = policy(() => new Response("gone", { status: 404 }));
    const e404 = await failure(fetchImage("https://images.example/x.png", "images[2]", notFound.policy));
    expect([e404.param, e404.reason, e404.message]).toEqual(["images[2]", "image_fetch_failed", "'images[2]' could not be fetched: images.example answered HTTP 404."]);

    const nowhere = await failure(fetchImage("https://nowhere.example/x.png", "images[0]", policy(() => image()).policy));
    expect(nowhere.reason).toBe("image_fetch_failed");
    expect(nowhere.message).toContain("could not be resolved (ENOTFOUND)");

    const reset = policy(() => Promise.reject(Object.assign(new Error("socket closed"), { code: "ECONNRESET" })));
    expect((await failure(fetchImage("https://images.example/x.png", "mask", reset.policy))).message).toContain("failed (ECONNRESET)");
  });

  test("the byte cap: a larger Content-Length is refused before the body; a body without one is counted", async () => {
    let pulled = 0;
    const big = policy(() => new Response(new ReadableStream({ pull: (c) => void (pulled++, c.enqueue(new Uint8Array(1024))) }), { headers: { "content-length": String(MAX_IMAGE_BYTES + 1) } }));
    const declared = await failure(fetchImage("https://images.example/x.png", "reference_image", big.policy));
    expect(declared.reason).toBe("image_too_large");
    expect(declared.message).toContain(`announced ${MAX_IMAGE_BYTES + 1} bytes`);

    const chunk = new Uint8Array(1024 * 1024);
    const endless = policy(() => new Response(new ReadableStream({ pull: (c) => c.enqueue(chunk) })));
    const counted = await failure(fetchImage("https://images.example/x.png", "reference_image", endless.policy));
    expect(counted.reason).toBe("image_too_large");
    expect(counted.message).toContain("while it was read");
    expect(pulled).toBeLessThan(5);
  });

  test("not an image: the same acceptance as an upload", async () => {
    const html = policy(() => new Response("<html>hi</html>", { headers: { "content-type": "image/png" } }));
    const e = await failure(fetchImage("https://images.example/x.png", "reference_image", html.policy));
    expect(e.reason).toBe("invalid_image_format");
    const empty = policy(() => new Response(""));
    expect((await failure(fetchImage("https://images.example/x.png", "reference_image", empty.policy))).reason).toBe("invalid_image");
  });

  test("one time limit for the whole fetch, the body included", async () => {
    const stalled = policy(
      (_, init) =>
        new Promise<Response>((_, reject) => init.signal?.addEventListener("abort", () => reject(Object.assign(new Error("aborted"), { name: "AbortError" })))),
      { timeoutMs: 150 },
    );
    const started = performance.now();
    const e = await failure(fetchImage("https://images.example/x.png", "reference_image", stalled.policy));
    expect([e.reason, e.message]).toEqual(["image_fetch_failed", "'reference_image' could not be fetched: no complete answer within 150 ms."]);
    expect(performance.now() - started).toBeLessThan(1_000);

    const slowBody = policy(() => new Response(new ReadableStream({ start: (c) => c.enqueue(PNG.subarray(0, 10)) })), { timeoutMs: 150 });
    expect((await failure(fetchImage("https://images.example/x.png", "reference_image", slowBody.policy))).message).toContain("within 150 ms");
  });
});
