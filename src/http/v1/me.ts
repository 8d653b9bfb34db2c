/** GET /v1/me: who the key belongs to, the balance, and this key's name, limits and spend. */
import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { apiAuth } from "../auth";
import { Integer, bearerSecurity, errorResponses, sharedModels } from "../shared";

const nullable = <T extends Parameters<typeof t.Union>[0][number]>(s: T, description: string) => t.Union([s, t.Null()], { description });

const MeKey = t.Object(
  {
    name: t.String({ description: "The key's name.", examples: ["laptop script"] }),
    prefix: t.String({ description: "The key's display prefix (never the secret).", examples: ["sk-atl-AbC12345"] }),
    created_at: Integer({ description: "Unix seconds when the key was created." }),
    expires_at: nullable(Integer(), "Unix seconds when the key stops working (401 `api_key_expired`); null: never."),
    credit_cap: nullable(Integer(), "Credits the key may spend in all; at the cap image requests answer 402 `key_credit_cap_reached`. Null: no cap."),
    credits_spent: Integer({ description: "Credits this key has spent: charged minus refunded (running requests included)." }),
    credits_remaining: nullable(Integer(), "What the key may still spend: the smaller of the balance and the cap's remainder; null without a cap."),
    allowed_models: nullable(t.Array(t.String()), "The model ids this key may use; null: every model."),
  },
  { additionalProperties: false },
);

const Me = t.Object(
  {
    object: t.Literal("me"),
    user: t.Object(
      {
        id: Integer(),
        email: t.String({ examples: ["ada@example.com"] }),
        role: t.Union([t.Literal("user"), t.Literal("admin")]),
      },
      { additionalProperties: false },
    ),
    balance: Integer({ description: "The account's credits (shared by all its keys).", examples: [42] }),
    key: t.Union([MeKey, t.Null()], { description: "The key that made this request; null for a signed-in workbench session." }),
  },
  {
    additionalProperties: false,
    examples: [
      {
        object: "me",
        user: { id: 1, email: "ada@example.com", role: "user" },
        balance: 42,
        key: { name: "laptop script", prefix: "sk-atl-AbC12345", created_at: 1763856000, expires_at: null, credit_cap: 100, credits_spent: 7, credits_remaining: 42, allowed_models: null },
      },
    ],
  },
);

const seconds = (ms: number) => Math.floor(ms / 1000);

export function meRoutes(services: Pick<Services, "auth" | "store">) {
  const { store } = services;
  return new Elysia({ name: "v1.me", prefix: "/v1" })
    .use(sharedModels)
    .model({ Me })
    .use(apiAuth(services.auth))
    .get(
      "/me",
      async ({ principal }) => {
        const balance = (await store.credits.balance(principal.userId)) ?? 0;
        const k = principal.key;
        let key = null;
        if (k && principal.keyId !== null) {
          const spent = await store.keys.spent(principal.keyId);
          const cap = k.limits.creditCap;
          key = {
            name: k.name,
            prefix: principal.keyPrefix ?? "",
            created_at: seconds(k.createdAt),
            expires_at: k.limits.expiresAt === null ? null : seconds(k.limits.expiresAt),
            credit_cap: cap,
            credits_spent: spent,
            credits_remaining: cap === null ? null : Math.max(0, Math.min(balance, cap - spent)),
            allowed_models: k.limits.allowedModels,
          };
        }
        return { object: "me" as const, user: { id: principal.userId, email: principal.email, role: principal.role }, balance, key };
      },
      {
        response: { 200: "Me", ...errorResponses(401, 403) },
        detail: {
          tags: ["Account"],
          summary: "Your account and this key",
          description: "The key holder's user, credit balance, and the calling key's name, expiry, credit cap, spend and model allow-list.",
          security: bearerSecurity,
          operationId: "retrieveMe",
        },
      },
    );
}
