/**
 * A user's webhook endpoint and signing secret, as the workbench manages them: the URL is
 * checked with the URL rule (webhooksTarget) before it is saved; the secret is made here, shown
 * once to the user and stored only sealed (webhooksSecretBox). Saving a first URL also makes
 * the first secret, since nothing can be sent unsigned.
 */
import type { Clock } from "./clock";
import { newWebhookSecret } from "./webhooksSignature";
import { secretContext, type SecretBox } from "./webhooksSecretBox";
import type { WebhookAttemptRow, WebhookDeliveryRow, WebhookRecords } from "./webhooksStore";
import { checkWebhookTarget, type WebhookUrlPolicy, type WebhookUrlProblem } from "./webhooksTarget";

export interface EndpointView {
  url: string | null;
  /** When the current secret was made; null when there is none. */
  secretCreatedAt: number | null;
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
  ) {}

  async view(userId: number): Promise<EndpointView> {
    const row = await this.records.endpoint(userId);
    return { url: row?.url ?? null, secretCreatedAt: row?.secret_created_at ?? null };
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
    await this.records.setEndpointUrl(userId, url, this.clock());
    const secret = (await this.hasSecret(userId)) ? null : await this.rotateSecret(userId);
    return { url, secret };
  }

  /** Removes the endpoint; its pending deliveries fail. The secret stays (per-request URLs use it). */
  async clear(userId: number): Promise<void> {
    await this.records.setEndpointUrl(userId, null, this.clock());
  }

  /** Makes a new secret, replacing the old one at once (retries are signed with the new one); returns it, to show once. */
  async rotateSecret(userId: number): Promise<string> {
    const secret = newWebhookSecret();
    await this.records.setSecret(userId, this.box.seal(secret, secretContext(userId)), this.clock());
    return secret;
  }

  /** The user's secret in plain text, to sign with; null when there is none. Throws when it cannot be opened (another key). */
  async secretOf(userId: number): Promise<string | null> {
    const sealed = (await this.records.endpoint(userId))?.secret_sealed ?? null;
    return sealed === null ? null : this.box.open(sealed, secretContext(userId));
  }

  /** The user's latest deliveries, newest first, each with its attempts in order. */
  async deliveries(userId: number, limit: number): Promise<DeliveryView[]> {
    const deliveries = await this.records.recentDeliveries(userId, limit);
    const attempts = await this.records.attemptsOf(deliveries.map((d) => d.id));
    return deliveries.map((delivery) => ({ delivery, attempts: attempts.filter((a) => a.delivery_id === delivery.id) }));
  }
}
