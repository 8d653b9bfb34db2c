/** Webhooks: the endpoint URL, the signing secret (shown once; a rotated-out one's overlap), a test event, the recent deliveries with their attempts. */
import type { DeliveryView, EndpointView } from "../../core/webhooksEndpoints";
import type { WebhookAttemptRow, WebhookDeliveryRow } from "../../core/webhooksStore";
import { classifyAttemptError } from "../../core/webhooksAttemptError";
import { MAX_WEBHOOK_URL_CHARS } from "../../core/webhooksTarget";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";
import { csrfField, message, page, type Viewer } from "../layout";

export interface WebhooksPageState {
  endpoint: EndpointView;
  deliveries: DeliveryView[];
  /** The retry schedule, for the explanation: attempts in all and the time from the first to the last. */
  schedule: { attempts: number; spanMs: number };
  /** How long a rotated-out secret stays valid ([webhooks] rotation_overlap_s, in ms); 0: not at all. */
  rotationOverlapMs: number;
  /** The URL as typed, when it was refused (so it can be corrected). */
  typedUrl?: string;
  /** A secret just made: shown this once. */
  secret?: string | null;
  error?: string | null;
  notice?: string | null;
}

function newSecret(t: Translator, secret: string, previousUntil: number | null): Html {
  // data-replace-url: a reload must not post the form again (and rotate the secret a second time).
  return html`<section class="card created-key" aria-labelledby="new-secret-title" data-replace-url="/webhooks">
  <h2 id="new-secret-title">${t("webhooks.secret.newHeading")}</h2>
  <p class="msg warning" role="alert">${t.html("webhooks.secret.warning")}</p>
  <div class="copy-row">
    <label class="visually-hidden" for="new-secret">${t("webhooks.secret.heading")}</label>
    <input id="new-secret" class="mono" type="text" readonly value="${secret}" data-testid="new-secret">
    <button type="button" class="primary" data-copy="#new-secret">${t("common.copy")}</button>
  </div>
  ${previousUntil === null ? "" : html`<p data-testid="previous-secret-valid">${t("webhooks.secret.previousValid", { time: formatTime(previousUntil) })}</p>`}
</section>`;
}

function endpointCard(v: Viewer, s: WebhooksPageState): Html {
  const t = v.t;
  const current = s.endpoint.url;
  return html`<section class="card" aria-labelledby="endpoint-title">
  <h2 id="endpoint-title">${t("webhooks.endpoint.heading")}</h2>
  <form method="post" action="/webhooks/endpoint">
    ${csrfField(v)}
    <label for="webhook-url">${t("webhooks.endpoint.label")}</label>
    <div class="copy-row">
      <input id="webhook-url" name="url" type="text" inputmode="url" autocomplete="off" spellcheck="false" required maxlength="${MAX_WEBHOOK_URL_CHARS}"
        placeholder="https://example.com/atelier-webhooks" value="${s.typedUrl ?? current ?? ""}">
      <button type="submit" class="primary">${t("webhooks.endpoint.save")}</button>
    </div>
  </form>
  <p class="muted">${t.html("webhooks.endpoint.hint")}</p>
  ${
    current
      ? html`<form method="post" action="/webhooks/endpoint/remove" class="inline" data-confirm="${t("webhooks.endpoint.removeConfirm")}">
      ${csrfField(v)}<button type="submit" class="danger small">${t("webhooks.endpoint.remove")}</button></form>`
      : ""
  }
</section>`;
}

function secretCard(v: Viewer, s: WebhooksPageState): Html {
  const t = v.t;
  const created = s.endpoint.secretCreatedAt;
  const previousUntil = s.endpoint.previousSecretExpiresAt;
  const overlap = s.rotationOverlapMs > 0;
  const span = spanText(t, s.rotationOverlapMs);
  const rotateConfirm = overlap ? t("webhooks.secret.rotateConfirmOverlap", { span }) : t("webhooks.secret.rotateConfirm");
  return html`<section class="card" aria-labelledby="secret-title">
  <h2 id="secret-title">${t("webhooks.secret.heading")}</h2>
  <p>${created === null ? t("webhooks.secret.none") : t("webhooks.secret.created", { time: formatTime(created) })}</p>
  ${previousUntil === null || s.secret ? "" : html`<p class="msg warning" data-testid="previous-secret-valid">${t("webhooks.secret.previousValid", { time: formatTime(previousUntil) })}</p>`}
  <div class="row">
    <form method="post" action="/webhooks/secret" class="inline"${created === null ? "" : html` data-confirm="${rotateConfirm}"`}>
      ${csrfField(v)}<button type="submit">${created === null ? t("webhooks.secret.create") : t("webhooks.secret.rotate")}</button>
    </form>
    ${
      created !== null && overlap
        ? html`<form method="post" action="/webhooks/secret" class="inline" data-confirm="${t("webhooks.secret.rotateNowConfirm")}">
      ${csrfField(v)}<input type="hidden" name="overlap" value="none"><button type="submit" class="danger">${t("webhooks.secret.rotateNow")}</button>
    </form>`
        : ""
    }
  </div>
  ${created !== null && overlap ? html`<p class="muted">${t("webhooks.secret.rotateHint", { span })}</p>` : ""}
</section>`;
}

function testCard(v: Viewer, s: WebhooksPageState): Html {
  const t = v.t;
  return html`<section class="card" aria-labelledby="test-title">
  <h2 id="test-title">${t("webhooks.test.heading")}</h2>
  <form method="post" action="/webhooks/test" class="row">
    ${csrfField(v)}<button type="submit"${s.endpoint.url ? "" : " disabled"}>${t("webhooks.test.send")}</button>
    <span class="muted">${t.html("webhooks.test.hint")}</span>
  </form>
</section>`;
}

function stateBadge(t: Translator, d: WebhookDeliveryRow): Html {
  if (d.state === "delivered") return html`<span class="status ok">${t("webhooks.state.delivered")}</span>`;
  if (d.state === "failed") return html`<span class="status bad">${t("webhooks.state.failed")}</span>`;
  return html`<span class="status warn">${t("webhooks.state.pending")}</span>`;
}

/**
 * A stored attempt error in the page's language; raw technical detail (the receiver's answer, a
 * system message, the refused URL's reason in English) follows as code, not as a sentence.
 */
function attemptErrorLine(t: Translator, stored: string): Html {
  const e = classifyAttemptError(stored);
  const detail = (d: string | null) => (d ? html` <code class="muted">${d}</code>` : "");
  switch (e.kind) {
    case "redirect":
      return html`${t("webhooks.attemptError.redirect", { status: e.status })}${detail(e.detail)}`;
    case "status":
      // "HTTP 503: <what the receiver said>", the same words as stored.
      return e.detail ? html`${t("webhooks.attemptError.statusSaid", { status: e.status })}${detail(e.detail)}` : html`${t("webhooks.attemptError.status", { status: e.status })}`;
    case "timeout":
      return html`${t("webhooks.attemptError.timeout", { ms: e.ms })}`;
    case "refused_connection":
    case "connection":
    case "not_sent":
    case "other":
      return html`${t(`webhooks.attemptError.${e.kind}`)}${detail(e.detail)}`;
    default:
      return html`${t(`webhooks.attemptError.${e.kind}`)}`;
  }
}

function attemptLine(t: Translator, a: WebhookAttemptRow): Html {
  const code = a.status === null ? t("webhooks.attempt.noAnswer") : String(a.status);
  const what = a.error === null ? html`<span class="status ok">${code}</span>` : html`<span class="status bad">${code}</span> ${attemptErrorLine(t, a.error)}`;
  return html`<li>${formatTime(a.attempted_at)} · ${a.duration_ms} ms · ${what}</li>`;
}

function sourceText(t: Translator, d: WebhookDeliveryRow): string {
  return d.source === "request" ? t("webhooks.source.request") : d.source === "test" ? t("webhooks.source.test") : t("webhooks.source.endpoint");
}

/** One delivery: a summary line (state, event, attempts, when), the details below it. */
function deliveryRow(t: Translator, view: DeliveryView, open: boolean): Html {
  const d = view.delivery;
  const when =
    d.state === "pending"
      ? t("webhooks.when.next", { time: formatTime(d.next_attempt_at) })
      : t(d.state === "delivered" ? "webhooks.when.delivered" : "webhooks.when.ended", { time: formatTime(d.finished_at) });
  const count = view.attempts.length;
  return html`<tr><td>
  <details${open ? " open" : ""}>
    <summary>${stateBadge(t, d)} <span class="mono">${d.event_type}</span> · ${t.plural("webhooks.attempts", count)} · <span class="muted">${when}</span></summary>
    <dl class="kv">
      <dt>${t("webhooks.fact.eventId")}</dt><dd class="mono">${d.event_id}</dd>
      <dt>${t("webhooks.fact.sentTo")}</dt><dd><span class="mono">${d.url}</span> <span class="muted">(${sourceText(t, d)})</span></dd>
      ${d.state === "failed" && d.last_error ? html`<dt>${t("webhooks.fact.why")}</dt><dd>${attemptErrorLine(t, d.last_error)}</dd>` : ""}
      <dt>${t("webhooks.fact.attempts")}</dt><dd>${count === 0 ? html`<span class="muted">${t("webhooks.fact.noAttempts")}</span>` : html`<ol class="attempts">${view.attempts.map((a) => attemptLine(t, a))}</ol>`}</dd>
    </dl>
  </details>
</td></tr>`;
}

/** "12 seconds", "35 minutes", "24 hours", "about 28 hours": the span of the retry schedule, or of a rotation's overlap. */
function spanText(t: Translator, ms: number): string {
  if (ms < 10_000) return t("webhooks.span.seconds", { count: (ms / 1000).toFixed(1) });
  if (ms < 120_000) return t("webhooks.span.seconds", { count: Math.round(ms / 1000) });
  if (ms < 7_200_000) return t("webhooks.span.minutes", { count: Math.round(ms / 60_000) });
  if (ms % 3_600_000 === 0) return t.plural("webhooks.span.wholeHours", ms / 3_600_000);
  return t("webhooks.span.hours", { count: Math.round(ms / 3_600_000) });
}

export function webhooksPage(v: Viewer, s: WebhooksPageState): Html {
  const t = v.t;
  return page({
    title: t("webhooks.title"),
    section: "webhooks",
    viewer: v,
    body: html`<h1>${t("webhooks.title")}</h1>
<p>${t.html("webhooks.intro", { attempts: s.schedule.attempts, span: spanText(t, s.schedule.spanMs) })}</p>
${message("error", s.error)}${message("notice", s.notice)}
${s.secret ? newSecret(t, s.secret, s.endpoint.previousSecretExpiresAt) : ""}
${endpointCard(v, s)}
${secretCard(v, s)}
${testCard(v, s)}
<section class="card" aria-labelledby="deliveries-title">
  <h2 id="deliveries-title">${t("webhooks.deliveries.heading")}</h2>
  ${
    s.deliveries.length === 0
      ? html`<p class="muted">${t("webhooks.deliveries.empty")}</p>`
      : html`<table class="deliveries"><tbody>${s.deliveries.map((d, i) => deliveryRow(t, d, i === 0))}</tbody></table>`
  }
</section>`,
  });
}
