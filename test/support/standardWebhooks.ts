/**
 * A Standard Webhooks verifier (symmetric v1), written from the specification's text and not
 * from our signer, as a receiver would: key = base64-decode(secret without "whsec_"); signed
 * content = "{webhook-id}.{webhook-timestamp}.{body}"; webhook-signature = space-separated
 * "v1,<base64 HMAC-SHA256>" entries, any of which may match; compared in constant time; the
 * timestamp must be within a tolerance of now (replay protection).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

export function verifyStandardWebhook(
  secret: string,
  headers: Record<string, string | null | undefined>,
  body: string,
  nowS: number,
  toleranceS = 300,
): boolean {
  const id = headers["webhook-id"];
  const timestamp = headers["webhook-timestamp"];
  const signatures = headers["webhook-signature"];
  if (!id || !timestamp || !signatures) return false;
  if (!/^\d+$/.test(timestamp) || Math.abs(nowS - Number(timestamp)) > toleranceS) return false;
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest();
  return signatures.split(" ").some((entry) => {
    const [version, encoded] = entry.split(",", 2);
    if (version !== "v1" || !encoded) return false;
    const given = Buffer.from(encoded, "base64");
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}
