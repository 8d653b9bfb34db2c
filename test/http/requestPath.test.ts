/**
 * pathOf reads the path straight from the request's URL text instead of parsing a URL: it must
 * give what URL.pathname gives for every URL a Request can hold, since CORS, the body rules,
 * the long-running routes and the access log all decide by it.
 */
import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { pathOf } from "../../src/http/requestMeta";

const samePathAsUrl = (url: string) => {
  const request = new Request(url);
  expect(pathOf(request)).toBe(new URL(request.url).pathname);
};

describe("pathOf", () => {
  test("matches URL.pathname for the URLs clients send", () => {
    for (const url of [
      "http://127.0.0.1:8080/v1/chat/completions",
      "http://h/v1/chat/completions?x=/y#z",
      "http://h/v1/../signin",
      "http://h/v1/%2e%2e/x",
      "http://h/a//b?q=1",
      "http://h/v1\\chat",
      "http://h/ü?ä=1",
      "http://[::1]:3000/v1/models",
      "http://user:pw@h/x/y",
      "https://atelier.example/",
      "http://h",
      "http://h?q",
      "http://h#/not-a-path",
      "http://h/a#b?c",
    ]) {
      samePathAsUrl(url);
    }
  });

  test("matches URL.pathname for any web URL", () => {
    fc.assert(
      fc.property(fc.webUrl({ withQueryParameters: true, withFragments: true }), (url) => samePathAsUrl(url)),
      { numRuns: 1000 },
    );
  });
});
