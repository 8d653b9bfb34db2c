/** The API keys pages: list, create (full key shown once, with code to copy), edit name and limits, revoke. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { createKey } from "../../core/accounts";
import { validateKeySettings, type KeySettings, type KeySettingsProblem } from "../../core/keyLimits";
import type { Translator } from "../../workbench/i18n";
import { keyEditPage, keysPage, type ModelChoice } from "../../workbench/pages/keys";
import { keySnippets } from "../../workbench/pages/keySnippets";
import { workbenchGuards } from "./guards";
import { formFields, htmlResponse, redirect } from "./respond";

const hide = { detail: { hide: true } };

/** A refused setting, in the viewer's language. */
function problemText(t: Translator, p: KeySettingsProblem): string {
  switch (p.kind) {
    case "name": return t("keys.error.name", { max: p.max });
    case "expiry": return t("keys.error.expiry", { max: p.maxDays });
    case "cap": return t("keys.error.cap", { max: p.max });
    case "too_many_models": return t("keys.error.tooManyModels", { max: p.max });
    case "unknown_model": return t("keys.error.unknownModel", { model: p.model });
  }
}

/** Every string value of a repeated form field (checkboxes): Elysia gives one string or a list. */
function formValues(body: unknown, name: string): string[] {
  const value = body && typeof body === "object" ? (body as Record<string, unknown>)[name] : undefined;
  const list = Array.isArray(value) ? value : value === undefined ? [] : [value];
  return list.filter((v): v is string => typeof v === "string");
}

export function keysRoutes(services: Services) {
  const { store, clock, catalog } = services;
  const models = (): ModelChoice[] => catalog.list().map((m) => ({ id: m.id, kind: m.kind }));
  const list = (userId: number) => store.keys.listWithSpend(userId);

  /** The settings a form sent, validated against the catalog. */
  function settingsFrom(body: unknown) {
    const f = formFields(body);
    return validateKeySettings(
      { name: f.name ?? "", expiresOn: f.expires_on ?? "", creditCap: f.credit_cap ?? "", allowedModels: formValues(body, "models") },
      catalog.list().map((m) => m.id),
      clock(),
    );
  }

  /** This server's API base as a client outside sees it: public_url when set, else the request's own origin. */
  const apiBase = (request: Request) => `${(services.config.server.public_url ?? new URL(request.url).origin).replace(/\/+$/, "")}/v1`;

  /** An image model the new key may use, for its code examples. */
  function snippetModel(s: KeySettings): string {
    const allowed = s.allowedModels;
    const images = catalog.list().filter((m) => m.kind === "image" && (allowed === null || allowed.includes(m.id)));
    return images.find((m) => m.id === catalog.defaultImageModel)?.id ?? images[0]?.id ?? allowed?.[0] ?? catalog.defaultImageModel ?? "builtin-image";
  }

  return new Elysia({ name: "workbench.keys" })
    .use(workbenchGuards(services))
    .get("/keys", async ({ viewer, query }) => {
      const notice = query.revoked === "1" ? viewer.t("keys.notice.revoked") : query.saved === "1" ? viewer.t("keys.notice.saved") : null;
      return htmlResponse(keysPage(viewer, { keys: await list(viewer.user.id), models: models(), now: clock(), notice }));
    }, { viewer: true, ...hide })
    .post("/keys", async ({ viewer, body, request }) => {
      const userId = viewer.user.id;
      const checked = settingsFrom(body);
      if (!checked.ok) return htmlResponse(keysPage(viewer, { keys: await list(userId), models: models(), now: clock(), error: problemText(viewer.t, checked.problem) }), 400);
      const { name, ...limits } = checked.settings;
      const { key } = await createKey(store, clock, userId, name, limits);
      const snippets = keySnippets({ secret: key.secret, baseUrl: apiBase(request), model: snippetModel(checked.settings) });
      // Rendered directly (not redirected): the full key exists only in this response.
      return htmlResponse(keysPage(viewer, { keys: await list(userId), models: models(), now: clock(), created: { name, secret: key.secret, snippets } }), 201);
    }, { viewer: true, ...hide })
    .get("/keys/:id", async ({ viewer, params }) => {
      const key = (await list(viewer.user.id)).find((k) => String(k.id) === params.id && k.revoked_at === null);
      if (!key) return htmlResponse(keysPage(viewer, { keys: await list(viewer.user.id), models: models(), now: clock(), error: viewer.t("keys.error.missing") }), 404);
      return htmlResponse(keyEditPage(viewer, { key, models: models() }));
    }, { viewer: true, ...hide })
    .post("/keys/:id", async ({ viewer, params, body }) => {
      const userId = viewer.user.id;
      const key = (await list(userId)).find((k) => String(k.id) === params.id && k.revoked_at === null);
      if (!key) return htmlResponse(keysPage(viewer, { keys: await list(userId), models: models(), now: clock(), error: viewer.t("keys.error.missing") }), 404);
      const checked = settingsFrom(body);
      if (!checked.ok) return htmlResponse(keyEditPage(viewer, { key, models: models(), error: problemText(viewer.t, checked.problem) }), 400);
      if (!(await store.keys.updateSettings(key.id, userId, checked.settings))) {
        return htmlResponse(keysPage(viewer, { keys: await list(userId), models: models(), now: clock(), error: viewer.t("keys.error.missing") }), 404);
      }
      return redirect("/keys?saved=1");
    }, { viewer: true, ...hide })
    .post("/keys/:id/revoke", async ({ viewer, params }) => {
      const id = Number(params.id);
      const userId = viewer.user.id;
      if (!Number.isInteger(id) || !(await store.keys.revoke(id, clock(), userId))) {
        return htmlResponse(keysPage(viewer, { keys: await list(userId), models: models(), now: clock(), error: viewer.t("keys.error.revoke") }), 404);
      }
      return redirect("/keys?revoked=1");
    }, { viewer: true, ...hide });
}
