import { expect, test } from "bun:test";
import { withoutCredentials } from "../../src/http/workbench/upstreamViews";

test("the admin page's base URL never shows user:password@ or a query token", () => {
  expect(withoutCredentials("https://user:s3cret@sd.example.com:7860/?token=abc")).toBe("https://sd.example.com:7860/");
  expect(withoutCredentials("http://127.0.0.1:7860")).toBe("http://127.0.0.1:7860/");
  expect(withoutCredentials("not a url")).toBe("(unparseable URL)");
});
