/**
 * A user's webhook endpoint and signing secret, as the workbench manages them: the URL is
 * checked with the URL rule (webhooksTarget) before it is saved; the secret is made here, shown
 * once to the user and stored only sealed (webhooksSecretBox). Saving a first URL also makes
 * the first secret, since nothing can be sent unsigned.
 *
 * Rotation overlaps, as Stripe's and Svix's do: the secret a rotation replaces stays valid for
 * the rotation overlap ([webhooks] rotation_overlap_s), and every attempt until then is signed
 * with both (webhook-signature lists the new one first). Deliveries already on their way and a
 * receiver not yet given the new secret keep verifying; after the overlap only the new one
 * signs. One previous secret at most: rotating again during an overlap makes the current secret
 * the previous one (with a fresh overlap) and drops the older one at once. An expired previous
 * secret never signs; it is deleted when an attempt finds it, or by the dispatcher's hourly sweep.
 */
import type { Clock } from "./clock";
import { newWebhookSecret, type SigningSecrets } from "./webhooksSignature";
import { secretContext, type SecretBox } from "./webhooksSecretBox";
import type { WebhookKeyCheck } from "./webhooksKeyCheck";
import type { WebhookAttemptRow, WebhookDeliveryRow, WebhookRecords } from "./webhooksStore";
import { checkWebhookTarget, type WebhookUrlPolicy, type WebhookUrlProblem } from "./webhooksTarget";

export interface EndpointView {
  url: string | null;
  /** When the current secret was made; null when there is none. */
  secretCreatedAt: number | null;
  /** Until when the secret the last rotation replaced still signs beside the current one; null when none does. */
  previousSecretExpiresAt: number | null;
}

export interface RotateOptions {
  /** false: the replaced secret stops at once (a leaked one); default true, for the rotation overlap. */
  keepPrevious?: boolean;
}

export interface DeliveryView {
  delivery: WebhookDeliveryRow;
  attempts: WebhookAttemptRow[];
}

export type SetUrlResult =
  | { refused: string; reason: WebhookUrlProblem; secret?: undefined }
  | { refused?: undefined; reason?: undefined; url: string; secret: string | null };

export class WebhookEndpoints {
  constructor(
    private readonly records: WebhookRecords,
    private readonly box: SecretBox,
    private readonly policy: WebhookUrlPolicy,
    private readonly clock: Clock,
    /** How long a replaced secret keeps signing (ms); 0: it stops at once. */
    private readonly rotationOverlapMs: number,
    /** Makes sure a secret is sealed only under the key the database's other secrets were. */
    private readonly keyCheck: WebhookKeyCheck,
  ) {}

  async view(userId: number): Promise<EndpointView> {
    const row = await this.records.endpoint(userId);
    const until = row?.previous_secret_expires_at ?? null;
    return { url: row?.url ?? null, secretCreatedAt: row?.secret_created_at ?? null, previousSecretExpiresAt: until !== null && until > this.clock() ? until : null };
  }

  async hasSecret(userId: number): Promise<boolean> {
    return ((await this.records.endpoint(userId))?.secret_sealed ?? null) !== null;
  }

  /**
   * Saves the endpoint after checking it (the host is resolved, so a private address is refused
   * now and not only at delivery). Returns the refusal, or the URL saved and the new secret when
   * this made the first one (shown once).
   */
  async setUrl(userId: number, text: string): Promise<SetUrlResult> {
    const check = await checkWebhookTarget(text.trim(), this.policy);
    if (!check.target) return { refused: check.refused, reason: check.reason };
    const url = check.target.url;
    // The first secret is made with the URL: a key that may not seal is refused before the URL
    // is saved, not after (which left an endpoint that nothing could sign for).
    const needsSecret = !(await this.hasSecret(userId));
    if (needsSecret) await this.keyCheck.beforeSeal();
    await this.records.setEndpointUrl(userId, url, this.clock());
    const secret = needsSecret ? await this.rotateSecret(userId) : null;
    return { url, secret };
  }

  /** Removes the endpoint; its pending deliveries fail. The secret stays (per-request URLs use it). */
  async clear(userId: number): Promise<void> {
    await this.records.setEndpointUrl(userId, null, this.clock());
  }

  /**
   * Makes a new secret and returns it, to show once. The secret it replaces keeps signing beside
   * it for the rotation overlap, unless `keepPrevious` is false or the overlap is 0; an earlier
   * previous secret still in its overlap is dropped (one previous at most).
   */
  async rotateSecret(userId: number, options: RotateOptions = {}): Promise<string> {
    const secret = newWebhookSecret();
    const now = this.clock();
    const keep = (options.keepPrevious ?? true) && this.rotationOverlapMs > 0;
    await this.keyCheck.beforeSeal();
    await this.records.rotateSecret(userId, this.box.seal(secret, secretContext(userId)), now, keep ? now + this.rotationOverlapMs : null);
    return secret;
  }

  /**
   * What an attempt now is signed with: the current secret, then the previous one while its
   * overlap lasts; null when there is no secret. Throws when either cannot be opened (another
   * key, or a row that was tampered with): the attempt then fails rather than sending a
   * signature the user did not expect.
   */
  async secretsOf(userId: number): Promise<SigningSecrets | null> {
    const row = await this.records.endpoint(userId);
    if (!row || row.secret_sealed === null) return null;
    const context = secretContext(userId);
    const current = this.box.open(row.secret_sealed, context);
    if (row.previous_secret_sealed === null || row.previous_secret_expires_at === null) return [current];
    const now = this.clock();
    if (row.previous_secret_expires_at > now) return [current, this.box.open(row.previous_secret_sealed, context)];
    // Expired: it never signs again, and goes now rather than at the next sweep. Only if still
    // expired, so a rotation in between keeps its new previous secret; a locked database leaves
    // it to the sweep.
    await this.records.dropExpiredPreviousSecrets(now, userId).catch(() => 0);
    return [current];
  }

  /** The user's latest deliveries, newest first, each with its attempts in order. */
  async deliveries(userId: number, limit: number): Promise<DeliveryView[]> {
    const deliveries = await this.records.recentDeliveries(userId, limit);
    const attempts = await this.records.attemptsOf(deliveries.map((d) => d.id));
    return deliveries.map((delivery) => ({ delivery, attempts: attempts.filter((a) => a.delivery_id === delivery.id) }));
  }
}
