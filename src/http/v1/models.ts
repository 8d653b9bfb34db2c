/** GET /v1/models and GET /v1/models/{model}: the catalog in OpenAI's shape. */
import { Elysia, t } from "elysia";
import type { CatalogModel, ModelCatalog } from "../../core/models";
import { apiAuth, authenticateApiRequest, mayUseModel, type ApiAuthDeps } from "../auth";
import { badRequest, modelNotFound } from "../errors";
import { bearerSecurity, errorResponses, Integer, sharedModels } from "../shared";

const ModelObject = t.Object(
  {
    id: t.String({ description: "The model id to send as `model`.", examples: ["builtin-image"] }),
    object: t.Literal("model"),
    created: Integer({ description: "Unix seconds when the model was added.", examples: [1767225600] }),
    owned_by: t.String({ description: "Who provides the model.", examples: ["atelier"] }),
    x_atelier_price: t.Integer({
      minimum: 0,
      description: "Atelier extension: credits one accepted image request with this model costs (refunded if it fails); 0 for chat models, which are free.",
      examples: [1],
    }),
  },
  // additionalProperties explicit: Elysia sets it in place when it compiles a response schema,
  // and these constants are shared by every app in the process (see ErrorResponseSchema).
  { description: "A model that can be used with this service.", additionalProperties: false },
);

const ModelList = t.Object({ object: t.Literal("list"), data: t.Array(t.Ref("Model")) }, { additionalProperties: false });

/** 400 for a path whose model id is not valid percent-encoding (also the document's example). */
export const modelPathNotDecodable = () =>
  badRequest("The model id in the path is not valid percent-encoding; encode it with encodeURIComponent (a slash is %2F).", "model", "invalid_value");

function toModelObject(m: CatalogModel) {
  return { id: m.id, object: "model" as const, created: m.created, owned_by: m.ownedBy, x_atelier_price: m.price };
}

export function modelsRoutes(deps: { catalog: ModelCatalog; auth: ApiAuthDeps }) {
  return new Elysia({ name: "v1.models", prefix: "/v1" })
    .use(sharedModels)
    .model({ Model: ModelObject, ModelList })
    .use(apiAuth(deps.auth))
    // A key with a model allow-list sees only the models it may use (the others answer 404 below).
    .get("/models", ({ principal }) => ({ object: "list" as const, data: deps.catalog.list().filter((m) => mayUseModel(principal, m.id)).map(toModelObject) }), {
      response: { 200: "ModelList", ...errorResponses(401, 403) },
      detail: {
        tags: ["Models"],
        summary: "List models",
        description:
          "Lists the image and chat models this service offers, including the built-in ones unless disabled. A key with a model allow-list sees only its allowed models.",
        security: bearerSecurity,
        operationId: "listModels",
      },
    })
    .get(
      "/models/:model",
      ({ params, principal }) => {
        const model = deps.catalog.get(params.model);
        if (!model || !mayUseModel(principal, model.id)) throw modelNotFound(params.model);
        return toModelObject(model);
      },
      {
        // Before params validation (which Elysia runs ahead of the auth step): a keyless client
        // gets its 401, and a path that is not valid percent-encoding (Elysia then has no value
        // at all) gets a message that says so instead of "Expected string".
        async transform({ request, params }) {
          await authenticateApiRequest(request, deps.auth);
          if (typeof (params as { model?: unknown }).model !== "string") {
            throw modelPathNotDecodable();
          }
        },
        params: t.Object({ model: t.String({ description: "The model id (percent-encoded in the path).", examples: ["builtin-image"] }) }),
        response: { 200: "Model", ...errorResponses(400, 401, 403, 404) },
        detail: {
          tags: ["Models"],
          summary: "Retrieve a model",
          description: "Returns one model by id; unknown ids (and models outside the key's allow-list) answer 404 with code `model_not_found`.",
          security: bearerSecurity,
          operationId: "retrieveModel",
        },
      },
    );
}
