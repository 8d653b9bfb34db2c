/**
 * Which IP addresses the server may connect to for a URL a user gave (a webhook, an image
 * reference): only public unicast ones. Without this rule anyone could make the server send
 * requests into its own network (server-side request forgery: a database's HTTP port, a cloud
 * metadata service at 169.254.169.254, an admin page on localhost). Refused, unless the operator
 * allows private addresses in the config:
 *
 *   IPv4  0/8 (this network, unspecified), 10/8, 172.16/12, 192.168/16 (private), 100.64/10
 *         (shared, carrier-grade NAT), 127/8 (loopback), 169.254/16 (link-local), 192.0.0/24
 *         (protocol assignments), 192.0.2/24, 198.51.100/24, 203.0.113/24 (documentation),
 *         192.88.99/24 (6to4 relays), 198.18/15 (benchmarking), 224/4 (multicast), 240/4
 *         (reserved, broadcast)
 *   IPv6  everything outside 2000::/3 (global unicast): ::, ::1, fc00::/7 (unique local),
 *         fe80::/10 (link-local), fec0::/10 (site-local), ff00::/8 (multicast), …; inside it
 *         2001::/23 (protocol assignments, Teredo), 2001:db8::/32 and 3fff::/20 (documentation).
 *         Addresses that carry an IPv4 address (IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96,
 *         NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by that IPv4 address; the deprecated
 *         IPv4-compatible ::/96 is always refused.
 *
 * Only literal addresses are judged here; pinnedFetch resolves names and connects to the address
 * it judged.
 */

export interface ParsedIp {
  version: 4 | 6;
  bytes: Uint8Array;
}

/** Dotted-quad decimal only (URL parsing and DNS answers already normalize other spellings). */
export function parseIpv4(text: string): Uint8Array | null {
  const parts = text.split(".");
  if (parts.length !== 4) return null;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i]!;
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p) || Number(p) > 255) return null;
    out[i] = Number(p);
  }
  return out;
}

/** RFC 4291 text forms: eight groups, one `::`, an IPv4 tail. A zone id (`%eth0`) is not accepted. */
export function parseIpv6(text: string): Uint8Array | null {
  if (text.includes("%")) return null;
  let head = text;
  let tail: Uint8Array | null = null;
  const lastColon = text.lastIndexOf(":");
  if (lastColon >= 0 && text.slice(lastColon + 1).includes(".")) {
    tail = parseIpv4(text.slice(lastColon + 1));
    if (!tail) return null;
    head = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const halves = head.split("::");
  if (halves.length > 2) return null;
  const groupsOf = (s: string) => (s === "" ? [] : s.split(":"));
  const left = groupsOf(halves[0]!);
  const right = halves.length === 2 ? groupsOf(halves[1]!) : [];
  if (halves.length === 2 && left.length + right.length > 7) return null;
  const groups = halves.length === 2 ? [...left, ...Array<string>(8 - left.length - right.length).fill("0"), ...right] : left;
  if (groups.length !== 8) return null;
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    const g = groups[i]!;
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
    const n = parseInt(g, 16);
    out[2 * i] = n >> 8;
    out[2 * i + 1] = n & 0xff;
  }
  if (tail) out.set(tail, 12);
  return out;
}

/** An IP literal (IPv6 with or without brackets), or null when the text is not one. */
export function parseIp(text: string): ParsedIp | null {
  const v4 = parseIpv4(text);
  if (v4) return { version: 4, bytes: v4 };
  const bare = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  const v6 = parseIpv6(bare);
  return v6 ? { version: 6, bytes: v6 } : null;
}

interface Block {
  prefix: Uint8Array;
  bits: number;
  label: string;
}

function block(cidr: string, label: string): Block {
  const [address, bits] = cidr.split("/");
  const ip = parseIp(address!);
  if (!ip) throw new Error(`bad CIDR ${cidr}`);
  return { prefix: ip.bytes, bits: Number(bits), label };
}

function inBlock(bytes: Uint8Array, b: Block): boolean {
  if (bytes.length !== b.prefix.length) return false;
  const full = b.bits >> 3;
  for (let i = 0; i < full; i++) if (bytes[i] !== b.prefix[i]) return false;
  const rest = b.bits & 7;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return (bytes[full]! & mask) === (b.prefix[full]! & mask);
}

const IPV4_REFUSED: Block[] = [
  block("0.0.0.0/8", "unspecified"),
  block("10.0.0.0/8", "private"),
  block("100.64.0.0/10", "shared (carrier-grade NAT)"),
  block("127.0.0.0/8", "loopback"),
  block("169.254.0.0/16", "link-local"),
  block("172.16.0.0/12", "private"),
  block("192.0.0.0/24", "special-purpose"),
  block("192.0.2.0/24", "documentation"),
  block("192.88.99.0/24", "special-purpose"),
  block("192.168.0.0/16", "private"),
  block("198.18.0.0/15", "benchmarking"),
  block("198.51.100.0/24", "documentation"),
  block("203.0.113.0/24", "documentation"),
  block("224.0.0.0/4", "multicast"),
  block("240.0.0.0/4", "reserved"),
];

/** IPv6 forms that carry an IPv4 address, and where it sits. */
const IPV6_EMBEDDING: { block: Block; at: number }[] = [
  { block: block("::ffff:0:0/96", "IPv4-mapped"), at: 12 },
  { block: block("64:ff9b::/96", "NAT64"), at: 12 },
  { block: block("2002::/16", "6to4"), at: 2 },
];

const IPV6_REFUSED: Block[] = [
  block("::/128", "unspecified"),
  block("::1/128", "loopback"),
  block("fc00::/7", "unique local"),
  block("fe80::/10", "link-local"),
  block("fec0::/10", "site-local"),
  block("ff00::/8", "multicast"),
  block("2001:db8::/32", "documentation"),
  block("3fff::/20", "documentation"),
  block("2001::/23", "special-purpose"),
];

const GLOBAL_UNICAST_V6 = block("2000::/3", "global unicast");
const IPV4_COMPATIBLE = block("::/96", "IPv4-compatible");

/**
 * Why the server may not connect to this address ("loopback", "private", "link-local", …), or null
 * when it is a public unicast address. Text that is no IP address is refused as such.
 */
export function addressRefusal(address: string): string | null {
  const ip = parseIp(address);
  if (!ip) return "not an IP address";
  return refusalOf(ip);
}

function refusalOf(ip: ParsedIp): string | null {
  if (ip.version === 4) return IPV4_REFUSED.find((b) => inBlock(ip.bytes, b))?.label ?? null;
  const named = IPV6_REFUSED.find((b) => b.bits === 128 && inBlock(ip.bytes, b));
  if (named) return named.label;
  for (const e of IPV6_EMBEDDING) {
    if (inBlock(ip.bytes, e.block)) {
      const inner = refusalOf({ version: 4, bytes: ip.bytes.slice(e.at, e.at + 4) });
      return inner === null ? null : `${e.block.label} ${inner}`;
    }
  }
  // ::a.b.c.d (deprecated IPv4-compatible, no route today): never a target; named by its IPv4 address.
  if (inBlock(ip.bytes, IPV4_COMPATIBLE)) {
    const inner = refusalOf({ version: 4, bytes: ip.bytes.slice(12, 16) });
    return `${IPV4_COMPATIBLE.label} ${inner ?? "(deprecated)"}`;
  }
  const listed = IPV6_REFUSED.find((b) => inBlock(ip.bytes, b));
  if (listed) return listed.label;
  return inBlock(ip.bytes, GLOBAL_UNICAST_V6) ? null : "reserved";
}
