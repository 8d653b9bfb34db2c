/**
 * Webhook signatures by the Standard Webhooks specification (the scheme OpenAI's own webhooks
 * use), symmetric variant:
 *
 *   secret             `whsec_` + base64 of random bytes; the HMAC key is the decoded bytes
 *   signed content     `${webhook-id}.${webhook-timestamp}.${body}`, the body exactly as sent
 *   webhook-signature  `v1,` + base64(HMAC-SHA256(key, signed content)); a space-separated
 *                      list, any entry of which verifies: we send one, or two while a
 *                      rotation's previous secret is still valid (the new secret's first), so
 *                      a receiver holding either secret accepts the message
 *   webhook-timestamp  the attempt's time in integer Unix seconds (new on every attempt, so a
 *                      receiver can refuse replays), webhook-id the event's id (the same on every
 *                      attempt, the receiver's idempotency key)
 */
import { createHmac, randomBytes } from "node:crypto";

export const WEBHOOK_SECRET_PREFIX = "whsec_";

/** Random bytes in a new secret: the spec asks for 24 to 64. */
const SECRET_BYTES = 32;

/** Message ids are ours, never a client's, and hold no `.` (the spec's rule: it delimits the signed content). */
const MESSAGE_ID = /^msg_[A-Za-z0-9_]+$/;

export function newWebhookSecret(): string {
  return WEBHOOK_SECRET_PREFIX + randomBytes(SECRET_BYTES).toString("base64");
}

/** The HMAC key of a secret: its base64 part decoded (a secret without the prefix is taken as the base64 part). */
export function webhookSigningKey(secret: string): Buffer {
  const encoded = secret.startsWith(WEBHOOK_SECRET_PREFIX) ? secret.slice(WEBHOOK_SECRET_PREFIX.length) : secret;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new Error("a webhook secret is whsec_ followed by base64");
  const key = Buffer.from(encoded, "base64");
  if (key.length === 0) throw new Error("empty webhook secret");
  return key;
}

/** `v1,<base64 HMAC-SHA256 of id.timestamp.body>`. */
export function signWebhook(secret: string, messageId: string, timestampS: number, body: string): string {
  if (!MESSAGE_ID.test(messageId)) throw new Error(`not a webhook message id: ${JSON.stringify(messageId)}`);
  if (!Number.isSafeInteger(timestampS)) throw new Error("a webhook timestamp is integer Unix seconds");
  const mac = createHmac("sha256", webhookSigningKey(secret)).update(`${messageId}.${timestampS}.${body}`, "utf8").digest("base64");
  return `v1,${mac}`;
}

/** The secrets one attempt is signed with, in the order their entries are listed: at least one. */
export type SigningSecrets = readonly [string, ...string[]];

/** The three Standard Webhooks headers of one attempt: webhook-signature has one entry per secret, in order. */
export function webhookHeaders(secrets: SigningSecrets, messageId: string, timestampS: number, body: string): Record<string, string> {
  return {
    "webhook-id": messageId,
    "webhook-timestamp": String(timestampS),
    "webhook-signature": secrets.map((secret) => signWebhook(secret, messageId, timestampS, body)).join(" "),
  };
}
