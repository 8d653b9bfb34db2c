/**
 * The webhook URL rule: which addresses are refused (IPv4, IPv6, IPv4 inside IPv6), URL syntax,
 * names resolved once (every address checked; the request pinned to the first), and the
 * operator's allow_private_addresses switch. The resolver is scripted: no DNS.
 */
import { describe, expect, test } from "bun:test";
import type { ResolveHost } from "../../src/core/pinnedFetch";
import { addressRefusal, parseIp } from "../../src/core/publicAddress";
import { checkWebhookTarget, webhookUrlSyntax } from "../../src/core/webhooksTarget";

describe("addresses", () => {
  const refused: [string, string][] = [
    ["127.0.0.1", "loopback"],
    ["127.255.0.9", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.168.1.20", "private"],
    ["169.254.169.254", "link-local"],
    ["100.64.0.1", "shared (carrier-grade NAT)"],
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "unspecified"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.250", "multicast"],
    ["255.255.255.255", "reserved"],
    ["240.0.0.1", "reserved"],
    ["192.0.2.10", "documentation"],
    ["198.51.100.1", "documentation"],
    ["203.0.113.7", "documentation"],
    ["198.18.0.1", "benchmarking"],
    ["192.0.0.8", "special-purpose"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["0:0:0:0:0:0:0:1", "loopback"],
    ["fe80::1", "link-local"],
    ["febf:ffff::1", "link-local"],
    ["fec0::1", "site-local"],
    ["fc00::1", "unique local"],
    ["fd12:3456:789a::1", "unique local"],
    ["ff02::1", "multicast"],
    ["2001:db8::1", "documentation"],
    ["2001::1", "special-purpose"],
    ["100::1", "reserved"],
    ["::ffff:127.0.0.1", "IPv4-mapped loopback"],
    ["::ffff:7f00:1", "IPv4-mapped loopback"],
    ["::FFFF:10.0.0.1", "IPv4-mapped private"],
    ["::ffff:169.254.169.254", "IPv4-mapped link-local"],
    ["64:ff9b::10.0.0.1", "NAT64 private"],
    ["2002:7f00:1::1", "6to4 loopback"],
    ["::127.0.0.1", "IPv4-compatible loopback"],
    ["::8.8.8.8", "IPv4-compatible (deprecated)"],
    ["fe80::1%eth0", "not an IP address"],
    ["example.com", "not an IP address"],
    ["1.2.3", "not an IP address"],
    ["01.2.3.4", "not an IP address"],
  ];
  for (const [address, why] of refused) {
    test(`${address} is refused as ${why}`, () => expect(addressRefusal(address)).toBe(why));
  }

  const allowed = ["8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.1", "100.128.0.1", "192.169.0.1", "2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "[2606:4700::1]"];
  for (const address of allowed) {
    test(`${address} is public`, () => expect(addressRefusal(address)).toBeNull());
  }

  test("IPv6 text forms parse to the same bytes", () => {
    const a = parseIp("2001:db8:0:0:0:0:0:1")!.bytes;
    expect(parseIp("2001:db8::1")!.bytes).toEqual(a);
    expect(parseIp("2001:DB8::0:1")!.bytes).toEqual(a);
    expect(parseIp("::ffff:1.2.3.4")!.bytes).toEqual(parseIp("::ffff:102:304")!.bytes);
    for (const bad of ["1::2::3", ":1::", "1:2:3:4:5:6:7:8:9", "12345::", "::ffff:1.2.3.256", "1:2:3:4:5:6:7::8:9"]) expect(parseIp(bad)).toBeNull();
  });
});

function resolver(table: Record<string, string[]>): ResolveHost & { calls: string[] } {
  const calls: string[] = [];
  const fn = async (host: string) => {
    calls.push(host);
    const found = table[host];
    if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
    return found;
  };
  return Object.assign(fn, { calls });
}

describe("webhook URLs", () => {
  test("syntax: absolute http(s), a host, no credentials, bounded length", () => {
    expect(webhookUrlSyntax("https://hooks.example.com/x?y=1#frag").url?.href).toBe("https://hooks.example.com/x?y=1");
    expect(webhookUrlSyntax("ftp://example.com/").problem).toContain("http:// or https://");
    expect(webhookUrlSyntax("javascript:alert(1)").problem).toContain("http:// or https://");
    expect(webhookUrlSyntax("/relative").problem).toContain("absolute");
    expect(webhookUrlSyntax("example.com/hook").problem).toBeDefined();
    expect(webhookUrlSyntax("https://user:pw@example.com/").problem).toContain("user name or password");
    expect(webhookUrlSyntax(`https://example.com/${"a".repeat(2100)}`).problem).toContain("at most 2048");
  });

  test("a name is resolved once, every address must be public, and the request is pinned to the first", async () => {
    const resolve = resolver({ "hooks.example.com": ["93.184.216.34", "2606:2800:220:1::1"], "mixed.example.com": ["93.184.216.34", "10.0.0.5"] });
    const ok = await checkWebhookTarget("https://hooks.example.com:8443/in?x=1", { allowPrivateAddresses: false, resolve });
    expect(ok.target).toEqual({
      url: "https://hooks.example.com:8443/in?x=1",
      connectUrl: "https://93.184.216.34:8443/in?x=1",
      hostHeader: "hooks.example.com:8443",
      serverName: "hooks.example.com",
      address: "93.184.216.34",
    });
    expect(resolve.calls).toEqual(["hooks.example.com"]);
    // One private address among public ones is enough to refuse (no choosing around it).
    const mixed = await checkWebhookTarget("http://mixed.example.com/", { allowPrivateAddresses: false, resolve });
    expect(mixed.refused).toBe("Webhooks may only go to public addresses: mixed.example.com resolves to 10.0.0.5, which is a private address.");
  });

  test("loopback names and literals are refused unless allowed; allowed, they are pinned too", async () => {
    const resolve = resolver({ localhost: ["127.0.0.1", "::1"], "v6only.test": ["::1"] });
    const strict = { allowPrivateAddresses: false, resolve };
    expect((await checkWebhookTarget("http://localhost:3000/hook", strict)).refused).toContain("localhost resolves to 127.0.0.1, which is a loopback address");
    expect((await checkWebhookTarget("http://127.0.0.1:3000/hook", strict)).refused).toBe("Webhooks may only go to public addresses: 127.0.0.1 is a loopback address.");
    expect((await checkWebhookTarget("http://[::ffff:127.0.0.1]/", strict)).refused).toContain("IPv4-mapped loopback");
    expect((await checkWebhookTarget("http://169.254.169.254/latest/meta-data", strict)).refused).toContain("link-local");
    // WHATWG URL parsing turns odd IPv4 spellings into dotted quads before we look.
    expect((await checkWebhookTarget("http://2130706433/", strict)).refused).toContain("127.0.0.1 is a loopback");
    expect((await checkWebhookTarget("http://0x7f.1/", strict)).refused).toContain("127.0.0.1 is a loopback");
    expect(resolve.calls).toEqual(["localhost"]);

    const open = { allowPrivateAddresses: true, resolve };
    const local = await checkWebhookTarget("http://localhost:3000/hook", open);
    expect(local.target?.connectUrl).toBe("http://127.0.0.1:3000/hook");
    expect(local.target?.hostHeader).toBe("localhost:3000");
    expect(local.target?.serverName).toBeUndefined();
    const v6 = await checkWebhookTarget("https://v6only.test/", open);
    expect(v6.target?.connectUrl).toBe("https://[::1]/");
    expect(v6.target?.serverName).toBe("v6only.test");
    const literal = await checkWebhookTarget("https://[::1]:9/x", open);
    expect(literal.target?.connectUrl).toBe("https://[::1]:9/x");
    expect(literal.target?.serverName).toBeUndefined();
  });

  test("a name that does not resolve is refused with the resolver's code", async () => {
    const r = await checkWebhookTarget("https://nowhere.invalid/", { allowPrivateAddresses: false, resolve: resolver({}) });
    expect(r.refused).toBe("The host nowhere.invalid could not be resolved (ENOTFOUND).");
    const empty = await checkWebhookTarget("https://empty.test/", { allowPrivateAddresses: false, resolve: async () => [] });
    expect(empty.refused).toBe("The host empty.test has no address.");
  });
});
