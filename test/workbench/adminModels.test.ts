import { expect, test } from "bun:test";
import { adminModelsPage } from "../../src/workbench/pages/admin";
import type { CatalogModel } from "../../src/core/models";
import { translator } from "../../src/workbench/i18n";

const model = (id: string, source: CatalogModel["source"]): CatalogModel => ({ id, kind: "image", ownedBy: "x", created: 0, source, upstreamModel: id, params: {}, price: 1 });

test("the models page shows the engine kind that serves each model (built-in, or its upstream's kind)", () => {
  const viewer = { user: { id: 1, email: "a@b.c", password_hash: null, role: "admin" as const, credits: 0, disabled: 0, created_at: 0 }, csrf: "t", t: translator("en") };
  const kinds: Record<string, string> = { sd: "sdwebui", oa: "openai" };
  const page = String(
    adminModelsPage(viewer, [model("builtin-image", { kind: "builtin" }), model("sdxl", { kind: "upstream", upstreamId: "sd" }), model("gpt-image", { kind: "upstream", upstreamId: "oa" })], (m) =>
      m.source.kind === "upstream" ? kinds[m.source.upstreamId]! : "built-in",
    ),
  );
  expect(page).toContain('<th scope="col">Engine</th>');
  const rows = [...page.matchAll(/<tr><td class="mono">([^<]+)<\/td><td>image<\/td><td class="mono">([^<]+)<\/td>/g)].map((m) => [m[1], m[2]]);
  expect(rows).toEqual([
    ["builtin-image", "built-in"],
    ["sdxl", "sdwebui"],
    ["gpt-image", "openai"],
  ]);
});

test("the models page shows each model's price: the number, or free for a price of 0 and for chat", () => {
  const viewer = { user: { id: 1, email: "a@b.c", password_hash: null, role: "admin" as const, credits: 0, disabled: 0, created_at: 0 }, csrf: "t", t: translator("en") };
  const models: CatalogModel[] = [
    { ...model("dear", { kind: "builtin" }), price: 5 },
    { ...model("gratis", { kind: "builtin" }), price: 0 },
    { ...model("talk", { kind: "builtin" }), kind: "chat", price: 0 },
  ];
  const page = String(adminModelsPage(viewer, models, () => "built-in"));
  expect(page).toContain('<th scope="col" class="num" title="Credits per accepted image request">Price</th>');
  const prices = [...page.matchAll(/<td class="num" data-testid="price">(.*?)<\/td>/g)].map((m) => m[1]);
  expect(prices).toEqual(["5", "free", '<span class="muted">free</span>']);
});
