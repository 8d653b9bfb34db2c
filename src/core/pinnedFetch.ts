/**
 * Connecting to a URL a user gave without letting DNS decide where the request goes:
 *
 * - the URL's host is resolved once, and every address it resolves to must be public
 *   (publicAddress) unless the operator allows private addresses; one refused address among
 *   public ones refuses the host (no choosing around it);
 * - the request then goes to the first of those addresses, not to the name:
 *   http(s)://<address>:<port>/<path> with the original Host header and, for https, the original
 *   name as TLS server name (SNI and certificate check). A name that resolves to a public address
 *   when checked and to 127.0.0.1 a moment later (DNS rebinding) cannot move the request,
 *   because no second lookup happens;
 * - redirects are never followed here and no proxy from the environment is used (the request
 *   must go to the address that was checked); a caller that follows redirects pins each hop.
 */
import { lookup } from "node:dns/promises";
import { addressRefusal, parseIp } from "./publicAddress";

/** Longest wait for a name to resolve. */
export const RESOLVE_TIMEOUT_MS = 5_000;

/** Every address a host name resolves to (A and AAAA), in the resolver's order. */
export type ResolveHost = (hostname: string) => Promise<string[]>;

export const systemResolver: ResolveHost = async (hostname) => (await lookup(hostname, { all: true, verbatim: true })).map((a) => a.address);

export interface AddressPolicy {
  /** Loopback, private, link-local… addresses allowed (the operator's switch). */
  allowPrivateAddresses: boolean;
  resolve: ResolveHost;
}

/** Where one request connects: a URL with the checked address in place of the name. */
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

/** Why a host cannot be connected to. */
export type PinRefusal =
  | { kind: "unresolved"; detail: string }
  | { kind: "no_address" }
  | { kind: "not_ip" }
  /** An address outside the public unicast space; `literal` when the URL named it directly. */
  | { kind: "not_public"; address: string; label: string; literal: boolean };

export type PinResult = { target: PinnedTarget; refused?: undefined } | { target?: undefined; refused: PinRefusal };

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)));
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/** Resolves the URL's host once and checks every address: the pinned target, or why not. */
export async function pinToCheckedAddress(url: URL, policy: AddressPolicy, resolveTimeoutMs = RESOLVE_TIMEOUT_MS): Promise<PinResult> {
  const literal = parseIp(url.hostname);
  let addresses: string[];
  if (literal) {
    addresses = [url.hostname.replace(/^\[|\]$/g, "")];
  } else {
    try {
      addresses = await withTimeout(policy.resolve(url.hostname), resolveTimeoutMs, "timed out");
    } catch (e) {
      return { refused: { kind: "unresolved", detail: (e as { code?: string }).code ?? (e as Error).message } };
    }
    if (addresses.length === 0) return { refused: { kind: "no_address" } };
  }
  if (!policy.allowPrivateAddresses) {
    for (const address of addresses) {
      const label = addressRefusal(address);
      if (label !== null) return { refused: { kind: "not_public", address, label, literal: literal !== null } };
    }
  }
  const address = addresses[0]!;
  const ip = parseIp(address);
  if (!ip) return { refused: { kind: "not_ip" } };
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

/**
 * A refusal as a sentence for the user; `publicOnly` opens the sentence for a non-public address
 * (e.g. "Webhooks may only go to public addresses").
 */
export function describePinRefusal(hostname: string, refused: PinRefusal, publicOnly: string): string {
  switch (refused.kind) {
    case "unresolved":
      return `The host ${hostname} could not be resolved (${refused.detail}).`;
    case "no_address":
      return `The host ${hostname} has no address.`;
    case "not_ip":
      return `The host ${hostname} resolved to something that is not an IP address.`;
    case "not_public": {
      const where = refused.literal ? refused.address : `${hostname} resolves to ${refused.address}, which`;
      return `${publicOnly}: ${where} is ${/^[aeiou]/.test(refused.label) ? "an" : "a"} ${refused.label} address.`;
    }
  }
}

/** The HTTP client a pinned request goes through (Bun's fetch; tests script it). */
export type PinnedFetcher = (url: string, init: BunFetchRequestInit) => Promise<Response>;

/**
 * Sends one request to the pinned address with the original Host and TLS server name; redirects
 * come back as they are (3xx), and no environment proxy is used.
 */
export function fetchPinned(target: PinnedTarget, init: BunFetchRequestInit, fetcher: PinnedFetcher = fetch): Promise<Response> {
  const pinned: BunFetchRequestInit = {
    ...init,
    headers: { ...(init.headers as Record<string, string> | undefined), host: target.hostHeader },
    redirect: "manual",
    proxy: false,
  };
  if (target.serverName) pinned.tls = { ...init.tls, serverName: target.serverName };
  return fetcher(target.connectUrl, pinned);
}
