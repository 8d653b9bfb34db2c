/** POST /credits/redeem: a signed-in user redeems a code (same-origin and CSRF via the guard). */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import type { RedeemResult } from "../../core/redemptionCodes";
import type { Translator } from "../../workbench/i18n";
import { workbenchGuards } from "./guards";
import { REDEEM_ROWS_SEARCHED, creditsPageResponse } from "./pagesRoutes";
import { clientAddress, formFields, redirect } from "./respond";

const hide = { detail: { hide: true } };

type Failure = Exclude<RedeemResult, { ok: true }>;

/** What the user is told, and the status, for each way a redemption fails. */
function failureOf(t: Translator, f: Failure): { error: string; status: number } {
  switch (f.reason) {
    case "malformed":
      return { error: t("codes.redeem.malformed"), status: 400 };
    case "unknown":
      return { error: t("codes.redeem.unknown"), status: 400 };
    case "used":
      return { error: t("codes.redeem.used"), status: 409 };
    case "expired":
      return { error: t("codes.redeem.expired"), status: 410 };
    case "throttled":
      return { error: t.plural("codes.redeem.throttled", Math.ceil(f.retryAfterMs / 60_000)), status: 429 };
  }
}

export function redeemRoutes(services: Services) {
  const { workbench, logger } = services;
  return new Elysia({ name: "workbench.redeem" })
    .use(workbenchGuards(services))
    .post("/credits/redeem", async ({ viewer, body, request }) => {
      const code = (formFields(body).code ?? "").slice(0, 100);
      const result = await workbench.codes.redeem(viewer.user.id, code, clientAddress(request));
      if (result.ok) {
        logger.info("redemption code redeemed", { user_id: viewer.user.id, credits: result.credits });
        // The page reads the notice back from the ledger row (see /credits), not from the link.
        const entry = (await services.store.credits.ledger(viewer.user.id, REDEEM_ROWS_SEARCHED)).find((row) => row.kind === "redeem");
        return redirect(`/credits${entry ? `?redeemed=${entry.id}` : ""}#redeem`);
      }
      const { error, status } = failureOf(viewer.t, result);
      // The code is never logged: a wrong one may be a typo of a real one.
      logger.warn("redemption code refused", { user_id: viewer.user.id, reason: result.reason });
      const response = await creditsPageResponse(services, viewer, {}, { error, code }, status);
      if (result.reason === "throttled") response.headers.set("retry-after", String(Math.max(1, Math.ceil(result.retryAfterMs / 1000))));
      return response;
    }, { viewer: true, ...hide });
}
