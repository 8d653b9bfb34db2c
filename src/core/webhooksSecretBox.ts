/**
 * Webhook signing secrets at rest. Unlike an API key, a signing secret cannot be stored as a
 * hash: every attempt needs it to sign. So it is encrypted with AES-256-GCM under a key kept
 * outside the database (a file beside it, or the config), and the database alone reveals no
 * secret. The user's id is bound in as associated data, so a sealed secret copied to another
 * user's row does not open.
 *
 * Sealed form: `v1.` + base64(12-byte nonce | ciphertext | 16-byte tag).
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";

const NONCE_BYTES = 12;
const TAG_BYTES = 16;
export const SECRET_BOX_KEY_BYTES = 32;
const KEY_CHECK_LABEL = "atelier webhook secret key check v1";

export class SecretBox {
  private key: Uint8Array | undefined;

  /** `key` is asked for once, on first use (so a key file is created only when a secret is). */
  constructor(private readonly loadKey: () => Uint8Array) {}

  private keyBytes(): Uint8Array {
    if (!this.key) {
      const key = this.loadKey();
      if (key.length !== SECRET_BOX_KEY_BYTES) throw new Error(`the webhook secret key must be ${SECRET_BOX_KEY_BYTES} bytes`);
      this.key = key;
    }
    return this.key;
  }

  /**
   * A value that tells this key apart from any other without revealing it (an HMAC of a fixed
   * label under the key): kept in the database, it says which key the stored secrets were sealed
   * with (core/webhooksKeyCheck).
   */
  checkValue(): Uint8Array {
    return new Uint8Array(createHmac("sha256", this.keyBytes()).update(KEY_CHECK_LABEL, "utf8").digest());
  }

  seal(plain: string, context: string): string {
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.keyBytes(), nonce);
    cipher.setAAD(Buffer.from(context, "utf8"));
    const body = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()]);
    return `v1.${Buffer.concat([nonce, body, cipher.getAuthTag()]).toString("base64")}`;
  }

  /** The plain text, or an error when the key, the context or the bytes are not the ones sealed. */
  open(sealed: string, context: string): string {
    if (!sealed.startsWith("v1.")) throw new Error("unknown sealed secret format");
    const raw = Buffer.from(sealed.slice(3), "base64");
    if (raw.length < NONCE_BYTES + TAG_BYTES) throw new Error("sealed secret too short");
    const decipher = createDecipheriv("aes-256-gcm", this.keyBytes(), raw.subarray(0, NONCE_BYTES));
    decipher.setAAD(Buffer.from(context, "utf8"));
    decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
    return Buffer.concat([decipher.update(raw.subarray(NONCE_BYTES, raw.length - TAG_BYTES)), decipher.final()]).toString("utf8");
  }
}

/** The associated data of a user's signing secret. */
export function secretContext(userId: number): string {
  return `atelier webhook secret, user ${userId}`;
}
