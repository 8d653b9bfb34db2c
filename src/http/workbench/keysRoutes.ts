/** The API keys page: list, create (full key shown once), revoke. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { createKey } from "../../core/accounts";
import { MAX_KEY_NAME_CHARS } from "../../core/limits";
import { keysPage } from "../../workbench/pages/keys";
import { workbenchGuards } from "./guards";
import { formFields, htmlResponse, redirect } from "./respond";

const hide = { detail: { hide: true } };

export function keysRoutes(services: Services) {
  const { store, clock } = services;
  return new Elysia({ name: "workbench.keys" })
    .use(workbenchGuards(services))
    .get("/keys", ({ viewer, query }) => {
      const notice = query.revoked === "1" ? viewer.t("keys.notice.revoked") : null;
      return htmlResponse(keysPage(viewer, { keys: store.keys.listForUser(viewer.user.id), notice }));
    }, { viewer: true, ...hide })
    .post("/keys", ({ viewer, body }) => {
      const name = (formFields(body).name ?? "").trim();
      const userId = viewer.user.id;
      if (name.length === 0 || name.length > MAX_KEY_NAME_CHARS) {
        return htmlResponse(keysPage(viewer, { keys: store.keys.listForUser(userId), error: viewer.t("keys.error.name", { max: MAX_KEY_NAME_CHARS }) }), 400);
      }
      const { key } = createKey(store, clock, userId, name);
      // Rendered directly (not redirected): the full key exists only in this response.
      return htmlResponse(keysPage(viewer, { keys: store.keys.listForUser(userId), created: { name, secret: key.secret } }), 201);
    }, { viewer: true, ...hide })
    .post("/keys/:id/revoke", ({ viewer, params }) => {
      const id = Number(params.id);
      const userId = viewer.user.id;
      if (!Number.isInteger(id) || !store.keys.revoke(id, clock(), userId)) {
        return htmlResponse(keysPage(viewer, { keys: store.keys.listForUser(userId), error: viewer.t("keys.error.revoke") }), 404);
      }
      return redirect("/keys?revoked=1");
    }, { viewer: true, ...hide });
}
