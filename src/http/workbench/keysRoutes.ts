/** The API keys page: list, create (full key shown once), revoke. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { createKey } from "../../core/accounts";
import { keysPage } from "../../workbench/pages/keys";
import { formFields, htmlResponse, redirect, requireCsrf, requireViewer } from "./respond";

const hide = { detail: { hide: true } };

export function keysRoutes(services: Services) {
  const { store, clock } = services;
  return new Elysia({ name: "workbench.keys" })
    .get("/keys", ({ request, query }) => {
      const g = requireViewer(services, request);
      if (g.response) return g.response;
      const notice = query.revoked === "1" ? "The key was revoked." : null;
      return htmlResponse(keysPage(g.viewer, { keys: store.keys.listForUser(g.viewer.user.id), notice }));
    }, hide)
    .post("/keys", ({ request, body }) => {
      const g = requireCsrf(services, request, body);
      if (g.response) return g.response;
      const name = (formFields(body).name ?? "").trim();
      const userId = g.viewer.user.id;
      if (name.length === 0 || name.length > 100) {
        return htmlResponse(keysPage(g.viewer, { keys: store.keys.listForUser(userId), error: "Give the key a name of 1 to 100 characters." }), 400);
      }
      const { key } = createKey(store, clock, userId, name);
      // Rendered directly (not redirected): the full key exists only in this response.
      return htmlResponse(keysPage(g.viewer, { keys: store.keys.listForUser(userId), created: { name, secret: key.secret } }), 201);
    }, hide)
    .post("/keys/:id/revoke", ({ request, body, params }) => {
      const g = requireCsrf(services, request, body);
      if (g.response) return g.response;
      const id = Number(params.id);
      const userId = g.viewer.user.id;
      if (!Number.isInteger(id) || !store.keys.revoke(id, clock(), userId)) {
        return htmlResponse(keysPage(g.viewer, { keys: store.keys.listForUser(userId), error: "That key does not exist or is already revoked." }), 404);
      }
      return redirect("/keys?revoked=1");
    }, hide);
}
