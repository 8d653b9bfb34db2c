/** GET /v1/usage: the key holder's requests and credits per day, model or key over a range of days. */
import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { MAX_USAGE_RANGE_DAYS, USAGE_DASHBOARD_DAYS } from "../../core/limits";
import { parseUsageGroup, usageRange, UsageQueryError, usageReport, USAGE_GROUPS } from "../../core/usage";
import { apiAuth } from "../auth";
import { badRequest } from "../errors";
import { Integer, bearerSecurity, errorResponses, sharedModels } from "../shared";

const COUNT_FIELDS = {
  requests: Integer({ description: "Every request (image and chat), whatever its outcome." }),
  image_requests: Integer({ description: "Charged image requests." }),
  images: Integer({ description: "Image requests that delivered an image." }),
  chat_requests: Integer({ description: "Chat completions (free)." }),
  succeeded: Integer(),
  failed: Integer({ description: "Failed or interrupted requests (image ones were refunded)." }),
  pending: Integer({ description: "Requests still running." }),
  credits_charged: Integer(),
  credits_refunded: Integer(),
  credits_spent: Integer({ description: "Charged minus refunded." }),
};

const UsageCounts = t.Object(COUNT_FIELDS, { additionalProperties: false });

const UsageRowSchema = t.Object(
  {
    group: t.String({ description: "The day (YYYY-MM-DD, UTC), the model id, or the key's prefix (`workbench` for signed-in use without a key).", examples: ["2026-11-20"] }),
    label: t.String({ description: "The key's name for group_by=key; otherwise the group again." }),
    ...COUNT_FIELDS,
  },
  { additionalProperties: false },
);

const Usage = t.Object(
  {
    object: t.Literal("usage"),
    from: t.String({ description: "First day, inclusive (UTC)." }),
    to: t.String({ description: "Last day, inclusive (UTC)." }),
    group_by: t.Union([t.Literal("day"), t.Literal("model"), t.Literal("key")]),
    data: t.Array(UsageRowSchema, { description: "One row per group; for group_by=day every day of the range, with zeros." }),
    totals: UsageCounts,
  },
  {
    additionalProperties: false,
    examples: [
      {
        object: "usage", from: "2026-11-20", to: "2026-11-20", group_by: "day",
        data: [{ group: "2026-11-20", label: "2026-11-20", requests: 3, image_requests: 2, images: 1, chat_requests: 1, succeeded: 2, failed: 1, pending: 0, credits_charged: 2, credits_refunded: 1, credits_spent: 1 }],
        totals: { requests: 3, image_requests: 2, images: 1, chat_requests: 1, succeeded: 2, failed: 1, pending: 0, credits_charged: 2, credits_refunded: 1, credits_spent: 1 },
      },
    ],
  },
);

const day = (description: string) => t.Optional(t.String({ description, examples: ["2026-11-01"], maxLength: 10 }));

export function usageRoutes(services: Pick<Services, "auth" | "store" | "clock">) {
  return new Elysia({ name: "v1.usage", prefix: "/v1" })
    .use(sharedModels)
    .model({ Usage })
    .use(apiAuth(services.auth))
    .get(
      "/usage",
      async ({ principal, query }) => {
        try {
          const range = usageRange(query, services.clock(), USAGE_DASHBOARD_DAYS);
          const groupBy = parseUsageGroup(query.group_by);
          const { rows, totals } = await usageReport(services.store.usage, principal.userId, range, groupBy);
          return { object: "usage" as const, from: range.from, to: range.to, group_by: groupBy, data: rows, totals };
        } catch (e) {
          if (e instanceof UsageQueryError) throw badRequest(e.message, e.param, "invalid_value");
          throw e;
        }
      },
      {
        query: t.Object({
          from: day(`First day (YYYY-MM-DD, UTC), inclusive; default: ${USAGE_DASHBOARD_DAYS - 1} days before 'to'.`),
          to: day("Last day (YYYY-MM-DD, UTC), inclusive; default: today."),
          group_by: t.Optional(t.String({ description: `One of ${USAGE_GROUPS.join(", ")} (default day).`, examples: ["day"], maxLength: 10 })),
        }),
        response: { 200: "Usage", ...errorResponses(400, 401, 403) },
        detail: {
          tags: ["Account"],
          summary: "Your usage",
          description:
            `Requests, images and credits of the key holder's account (every key and the workbench) per day, model or key, over at most ${MAX_USAGE_RANGE_DAYS} days. ` +
            "The figures come from the request history, so they equal the ledger's charges and refunds for the same requests.",
          security: bearerSecurity,
          operationId: "retrieveUsage",
        },
      },
    );
}
