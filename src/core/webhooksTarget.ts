/**
 * The URL rule for webhooks, and where an attempt connects:
 *
 * - an absolute http:// or https:// URL of at most MAX_WEBHOOK_URL_CHARS, with a host and no
 *   user:password part;
 * - its host is resolved once per attempt, and every address it resolves to must be public
 *   unless the operator allows private addresses; the attempt connects to the checked address
 *   (pinnedFetch: the rule and why).
 */
import { describePinRefusal, pinToCheckedAddress, type AddressPolicy, type PinnedTarget, type PinRefusal } from "./pinnedFetch";

export const MAX_WEBHOOK_URL_CHARS = 2048;

export type WebhookUrlPolicy = AddressPolicy;

/**
 * Why a webhook URL is refused, as a code with its parameters: the workbench words it in the
 * page's language (http/workbench/webhookProblems.ts), the /v1 API in English (describeWebhookUrlProblem).
 */
export type WebhookUrlProblem =
  | { code: "too_long"; max: number }
  | { code: "not_absolute" }
  | { code: "bad_scheme" }
  | { code: "no_host" }
  | { code: "has_credentials" }
  | { code: "address"; hostname: string; refusal: PinRefusal };

export type TargetCheck =
  | { target: PinnedTarget; refused?: undefined; reason?: undefined }
  | { target?: undefined; refused: string; reason: WebhookUrlProblem };

const PUBLIC_ONLY = "Webhooks may only go to public addresses";

/** The English sentence for a refusal (the /v1 API and logs). */
export function describeWebhookUrlProblem(reason: WebhookUrlProblem): string {
  switch (reason.code) {
    case "too_long":
      return `A webhook URL may have at most ${reason.max} characters.`;
    case "not_absolute":
      return "A webhook URL must be an absolute http:// or https:// URL.";
    case "bad_scheme":
      return "A webhook URL must start with http:// or https://.";
    case "no_host":
      return "A webhook URL needs a host.";
    case "has_credentials":
      return "A webhook URL must not contain a user name or password.";
    case "address":
      return describePinRefusal(reason.hostname, reason.refusal, PUBLIC_ONLY);
  }
}

function refusal(reason: WebhookUrlProblem): { url?: undefined; problem: string; reason: WebhookUrlProblem } {
  return { problem: describeWebhookUrlProblem(reason), reason };
}

/** The URL's syntax problem, or null; no lookup. Returns the parsed URL on success. */
export function webhookUrlSyntax(
  text: string,
): { url: URL; problem?: undefined; reason?: undefined } | { url?: undefined; problem: string; reason: WebhookUrlProblem } {
  if (text.length > MAX_WEBHOOK_URL_CHARS) return refusal({ code: "too_long", max: MAX_WEBHOOK_URL_CHARS });
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return refusal({ code: "not_absolute" });
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return refusal({ code: "bad_scheme" });
  if (url.hostname === "") return refusal({ code: "no_host" });
  if (url.username !== "" || url.password !== "") return refusal({ code: "has_credentials" });
  url.hash = "";
  return { url };
}

/**
 * Checks a webhook URL and resolves its host once: the pinned target to connect to, or why it
 * is refused (a sentence for the user).
 */
export async function checkWebhookTarget(text: string, policy: WebhookUrlPolicy): Promise<TargetCheck> {
  const syntax = webhookUrlSyntax(text);
  if (!syntax.url) return { refused: syntax.problem, reason: syntax.reason };
  const url = syntax.url;
  const pinned = await pinToCheckedAddress(url, policy);
  if (pinned.refused) {
    const reason: WebhookUrlProblem = { code: "address", hostname: url.hostname, refusal: pinned.refused };
    return { refused: describeWebhookUrlProblem(reason), reason };
  }
  return { target: pinned.target };
}
