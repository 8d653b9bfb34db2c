/** A refused webhook URL (core/webhooksTarget's WebhookUrlProblem) in the page's language. */
import type { WebhookUrlProblem } from "../../core/webhooksTarget";
import type { Translator } from "../../workbench/i18n";

export function webhookUrlProblemText(t: Translator, reason: WebhookUrlProblem): string {
  if (reason.code === "too_long") return t("webhooks.problem.too_long", { count: reason.max });
  if (reason.code !== "address") return t(`webhooks.problem.${reason.code}`);
  const host = reason.hostname;
  const refusal = reason.refusal;
  switch (refusal.kind) {
    case "unresolved":
      return t("webhooks.problem.unresolved", { host, detail: refusal.detail });
    case "no_address":
      return t("webhooks.problem.no_address", { host });
    case "not_ip":
      return t("webhooks.problem.not_ip", { host });
    case "not_public": {
      // The address class (loopback, private, …) stays the technical term core names it; the
      // English article picks the key, so the English sentence matches the /v1 one exactly.
      const article = /^[aeiou]/.test(refusal.label) ? "an" : "a";
      const params = { address: refusal.address, label: refusal.label };
      return refusal.literal ? t(`webhooks.problem.not_public_literal.${article}`, params) : t(`webhooks.problem.not_public.${article}`, { ...params, host });
    }
  }
}
