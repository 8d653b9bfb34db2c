/** POST /credits/redeem: a signed-in user redeems a code (same-origin and CSRF via the guard). */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import type { RedeemResult } from "../../core/redemptionCodes";
import { workbenchGuards } from "./guards";
import { creditsPageResponse } from "./pagesRoutes";
import { clientAddress, formFields, redirect } from "./respond";

const hide = { detail: { hide: true } };

type Failure = Exclude<RedeemResult, { ok: true }>;

/** What the user is told, and the status, for each way a redemption fails. */
function failureOf(f: Failure): { error: string; status: number } {
  switch (f.reason) {
    case "malformed":
      return { error: "That is not a redemption code: a code has 20 letters and digits, like ABCDE-FGHJK-LMNPQ-RSTUV.", status: 400 };
    case "unknown":
      return { error: "No such code. Check it and try again.", status: 400 };
    case "used":
      return { error: "This code was already redeemed.", status: 409 };
    case "expired":
      return { error: "This code has expired.", status: 410 };
    case "throttled": {
      const minutes = Math.ceil(f.retryAfterMs / 60_000);
      return { error: `Too many failed attempts. Try again in ${minutes} minute${minutes === 1 ? "" : "s"}.`, status: 429 };
    }
  }
}

export function redeemRoutes(services: Services) {
  const { workbench, logger } = services;
  return new Elysia({ name: "workbench.redeem" })
    .use(workbenchGuards(services))
    .post("/credits/redeem", ({ viewer, body, request }) => {
      const code = (formFields(body).code ?? "").slice(0, 100);
      const result = workbench.codes.redeem(viewer.user.id, code, clientAddress(request));
      if (result.ok) {
        logger.info("redemption code redeemed", { user_id: viewer.user.id, credits: result.credits });
        return redirect(`/credits?redeemed=${result.credits}#redeem`);
      }
      const { error, status } = failureOf(result);
      // The code is never logged: a wrong one may be a typo of a real one.
      logger.warn("redemption code refused", { user_id: viewer.user.id, reason: result.reason });
      const response = creditsPageResponse(services, viewer, {}, { error, code }, status);
      if (result.reason === "throttled") response.headers.set("retry-after", String(Math.max(1, Math.ceil(result.retryAfterMs / 1000))));
      return response;
    }, { viewer: true, ...hide });
}
