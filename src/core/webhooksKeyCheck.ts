/**
 * Which key sealed the webhook signing secrets in the database. The key lives outside it
 * ([webhooks] secret_key, or data_dir/webhook-secrets.key, made on first use), so two instances
 * given different keys, or a data directory restored without its key file, would each seal
 * and try to open secrets under their own: every attempt of theirs then failed ("cannot be
 * opened") and was retried until given up, and a rotation made on one instance could not be
 * opened by the others. So the first key that seals a secret leaves its check value in the
 * database (SecretBox.checkValue, an HMAC of a label: it reveals nothing of the key), and:
 * - at start, a server whose key is not that one refuses to start (WebhookKeyMismatch says
 *   what to do), rather than fail its users' deliveries; a database from before the check
 *   (secrets, no check value) is recognised by opening one of its secrets;
 * - before each seal, the check value is claimed (written if absent, else compared), so two
 *   instances that started together on an empty database with different keys cannot both seal.
 * Nothing is checked, and no key file made, while no secret has been sealed.
 */
import { timingSafeEqual } from "node:crypto";
import type { Clock } from "./clock";
import { secretContext, type SecretBox } from "./webhooksSecretBox";

/** What the check needs of the store. */
export interface WebhookKeyCheckRecords {
  /** The check value of the key that sealed the stored secrets, or null before the first seal. */
  keyCheck(): Promise<Uint8Array | null>;
  /** Stores `value` unless a check value is already stored; returns the one stored. */
  claimKeyCheck(value: Uint8Array, now: number): Promise<Uint8Array>;
  /** Any one stored sealed secret (current or previous) with its user, or null when there is none. */
  anySealedSecret(): Promise<{ userId: number; sealed: string } | null>;
}

const WAY_OUT =
  "If that key is lost for good, `atelier webhooks forget-secrets --yes` drops the secrets sealed with it (users then make new ones on the workbench's Webhooks page).";

export class WebhookKeyMismatch extends Error {
  override name = "WebhookKeyMismatch";
  /** `missing`: the key file is gone (none is made in its place while the database holds secrets). */
  constructor(readonly why: "another key" | "missing" = "another key") {
    super(
      why === "missing"
        ? `data_dir/webhook-secrets.key is missing, and this database holds webhook signing secrets sealed with it: put it back from the backup the database came with (or set [webhooks] secret_key to it). ${WAY_OUT}`
        : "the webhook secret key is not the one this database's webhook signing secrets were sealed with: " +
            `give every instance the same [webhooks] secret_key, or put back the data directory's webhook-secrets.key from the backup it came with. ${WAY_OUT}`,
    );
  }
}

export class WebhookKeyCheck {
  constructor(
    private readonly records: WebhookKeyCheckRecords,
    private readonly box: SecretBox,
    private readonly clock: Clock,
    /**
     * Whether the key exists without making it (the key file is made on first use): false
     * while the database holds secrets means the file was lost, which is said as such rather
     * than hidden behind a new key made in its place.
     */
    private readonly keyExists: () => boolean = () => true,
  ) {}

  /** At start: throws WebhookKeyMismatch when the stored secrets were sealed under another key, or the key file is gone. */
  async verify(): Promise<void> {
    const stored = await this.records.keyCheck();
    const sample = stored === null ? await this.records.anySealedSecret() : null;
    if (stored === null && sample === null) return;
    if (!this.keyExists()) throw new WebhookKeyMismatch("missing");
    if (stored !== null) return this.compare(stored);
    // Sealed before the check existed: the key is the right one if it opens a secret.
    try {
      this.box.open(sample!.sealed, secretContext(sample!.userId));
    } catch {
      throw new WebhookKeyMismatch();
    }
    this.compare(await this.records.claimKeyCheck(this.box.checkValue(), this.clock()));
  }

  /** Before a secret is sealed: this key becomes the database's if none is yet, else must be it. */
  async beforeSeal(): Promise<void> {
    this.compare(await this.records.claimKeyCheck(this.box.checkValue(), this.clock()));
  }

  private compare(stored: Uint8Array): void {
    const mine = this.box.checkValue();
    if (stored.length !== mine.length || !timingSafeEqual(stored, mine)) throw new WebhookKeyMismatch();
  }
}
