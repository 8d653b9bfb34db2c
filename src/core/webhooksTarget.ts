/**
 * The URL rule for webhooks, and where an attempt connects:
 *
 * - an absolute http:// or https:// URL of at most MAX_WEBHOOK_URL_CHARS, with a host and no
 *   user:password part;
 * - its host is resolved once per attempt, and every address it resolves to must be public
 *   unless the operator allows private addresses; the attempt connects to the checked address
 *   (pinnedFetch: the rule and why).
 */
import { describePinRefusal, pinToCheckedAddress, type AddressPolicy, type PinnedTarget } from "./pinnedFetch";

export const MAX_WEBHOOK_URL_CHARS = 2048;

export type WebhookUrlPolicy = AddressPolicy;

export type TargetCheck = { target: PinnedTarget; refused?: undefined } | { target?: undefined; refused: string };

/** The URL's syntax problem, or null; no lookup. Returns the parsed URL on success. */
export function webhookUrlSyntax(text: string): { url: URL; problem?: undefined } | { url?: undefined; problem: string } {
  if (text.length > MAX_WEBHOOK_URL_CHARS) return { problem: `A webhook URL may have at most ${MAX_WEBHOOK_URL_CHARS} characters.` };
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { problem: "A webhook URL must be an absolute http:// or https:// URL." };
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return { problem: "A webhook URL must start with http:// or https://." };
  if (url.hostname === "") return { problem: "A webhook URL needs a host." };
  if (url.username !== "" || url.password !== "") return { problem: "A webhook URL must not contain a user name or password." };
  url.hash = "";
  return { url };
}

/**
 * Checks a webhook URL and resolves its host once: the pinned target to connect to, or why it
 * is refused (a sentence for the user).
 */
export async function checkWebhookTarget(text: string, policy: WebhookUrlPolicy): Promise<TargetCheck> {
  const syntax = webhookUrlSyntax(text);
  if (!syntax.url) return { refused: syntax.problem };
  const url = syntax.url;
  const pinned = await pinToCheckedAddress(url, policy);
  if (pinned.refused) return { refused: describePinRefusal(url.hostname, pinned.refused, "Webhooks may only go to public addresses") };
  return { target: pinned.target };
}
