/**
 * The URL rule for webhooks, and where an attempt connects:
 *
 * - an absolute http:// or https:// URL of at most MAX_WEBHOOK_URL_CHARS, with a host and no
 *   user:password part;
 * - its host is resolved once per attempt, and every address it resolves to must be public
 *   (webhooksAddress) unless the operator allows private addresses;
 * - the attempt then connects to the first of those addresses, not to the name: the request goes
 *   to http(s)://<address>:<port>/<path> with the original Host header and, for https, the
 *   original name as TLS server name (SNI and certificate check). A name that resolves to a
 *   public address when checked and to 127.0.0.1 a moment later (DNS rebinding) cannot redirect
 *   the request, because no second lookup happens.
 */
import { lookup } from "node:dns/promises";
import { addressRefusal, parseIp } from "./webhooksAddress";

export const MAX_WEBHOOK_URL_CHARS = 2048;

/** Longest wait for a name to resolve. */
const RESOLVE_TIMEOUT_MS = 5_000;

/** Every address a host name resolves to (A and AAAA), in the resolver's order. */
export type ResolveHost = (hostname: string) => Promise<string[]>;

export const systemResolver: ResolveHost = async (hostname) => (await lookup(hostname, { all: true, verbatim: true })).map((a) => a.address);

export interface WebhookUrlPolicy {
  /** The operator's `[webhooks] allow_private_addresses`: loopback, private, link-local… allowed. */
  allowPrivateAddresses: boolean;
  resolve: ResolveHost;
}

/** Where one attempt connects: a URL with the checked address in place of the name. */
export interface PinnedTarget {
  /** The URL as the user gave it (normalized). */
  url: string;
  /** The same URL with the checked IP address as host. */
  connectUrl: string;
  /** The original host (and port), for the Host header. */
  hostHeader: string;
  /** For https to a name: the TLS server name (SNI) and the name the certificate must match. */
  serverName?: string;
  address: string;
}

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

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)));
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Checks a webhook URL and resolves its host once: the pinned target to connect to, or why it
 * is refused (a sentence for the user).
 */
export async function checkWebhookTarget(text: string, policy: WebhookUrlPolicy): Promise<TargetCheck> {
  const syntax = webhookUrlSyntax(text);
  if (!syntax.url) return { refused: syntax.problem };
  const url = syntax.url;
  const literal = parseIp(url.hostname);
  let addresses: string[];
  if (literal) {
    addresses = [url.hostname.replace(/^\[|\]$/g, "")];
  } else {
    try {
      addresses = await withTimeout(policy.resolve(url.hostname), RESOLVE_TIMEOUT_MS, "timed out");
    } catch (e) {
      return { refused: `The host ${url.hostname} could not be resolved (${(e as { code?: string }).code ?? (e as Error).message}).` };
    }
    if (addresses.length === 0) return { refused: `The host ${url.hostname} has no address.` };
  }
  if (!policy.allowPrivateAddresses) {
    for (const address of addresses) {
      const refusal = addressRefusal(address);
      if (refusal !== null) {
        const where = literal ? `${address}` : `${url.hostname} resolves to ${address}, which`;
        return { refused: `Webhooks may only go to public addresses: ${where} is ${/^[aeiou]/.test(refusal) ? "an" : "a"} ${refusal} address.` };
      }
    }
  }
  const address = addresses[0]!;
  const ip = parseIp(address);
  if (!ip) return { refused: `The host ${url.hostname} resolved to something that is not an IP address.` };
  const pinned = new URL(url.href);
  pinned.hostname = ip.version === 6 ? `[${address}]` : address;
  return {
    target: {
      url: url.href,
      connectUrl: pinned.href,
      hostHeader: url.host,
      serverName: url.protocol === "https:" && !literal ? url.hostname : undefined,
      address,
    },
  };
}
