/** Webhooks: the endpoint URL, the signing secret (shown once), a test event, the recent deliveries with their attempts. */
import type { DeliveryView, EndpointView } from "../../core/webhooksEndpoints";
import type { WebhookAttemptRow, WebhookDeliveryRow } from "../../core/webhooksStore";
import { MAX_WEBHOOK_URL_CHARS } from "../../core/webhooksTarget";
import { formatTime, html, type Html } from "../html";
import { csrfField, message, page, type Viewer } from "../layout";

export interface WebhooksPageState {
  endpoint: EndpointView;
  deliveries: DeliveryView[];
  /** The retry schedule, for the explanation: attempts in all and the time from the first to the last. */
  schedule: { attempts: number; spanMs: number };
  /** The URL as typed, when it was refused (so it can be corrected). */
  typedUrl?: string;
  /** A secret just made: shown this once. */
  secret?: string | null;
  error?: string | null;
  notice?: string | null;
}

function newSecret(secret: string): Html {
  // data-replace-url: a reload must not post the form again (and rotate the secret a second time).
  return html`<section class="card created-key" aria-labelledby="new-secret-title" data-replace-url="/webhooks">
  <h2 id="new-secret-title">Your signing secret</h2>
  <p class="msg warning" role="alert"><strong>Copy it now.</strong> This is the only time it is shown. Your receiver needs it to check that a webhook came from here.</p>
  <div class="copy-row">
    <label class="visually-hidden" for="new-secret">Signing secret</label>
    <input id="new-secret" class="mono" type="text" readonly value="${secret}" data-testid="new-secret">
    <button type="button" class="primary" data-copy="#new-secret">Copy</button>
  </div>
</section>`;
}

function endpointCard(v: Viewer, s: WebhooksPageState): Html {
  const current = s.endpoint.url;
  return html`<section class="card" aria-labelledby="endpoint-title">
  <h2 id="endpoint-title">Endpoint</h2>
  <form method="post" action="/webhooks/endpoint">
    ${csrfField(v)}
    <label for="webhook-url">Endpoint URL</label>
    <div class="copy-row">
      <input id="webhook-url" name="url" type="text" inputmode="url" autocomplete="off" spellcheck="false" required maxlength="${MAX_WEBHOOK_URL_CHARS}"
        placeholder="https://example.com/atelier-webhooks" value="${s.typedUrl ?? current ?? ""}">
      <button type="submit" class="primary">Save</button>
    </div>
  </form>
  <p class="muted">An <code>http://</code> or <code>https://</code> URL on the public internet. Redirects are not followed.</p>
  ${
    current
      ? html`<form method="post" action="/webhooks/endpoint/remove" class="inline" data-confirm="Remove the endpoint? Deliveries still waiting for it are dropped.">
      ${csrfField(v)}<button type="submit" class="danger small">Remove endpoint</button></form>`
      : ""
  }
</section>`;
}

function secretCard(v: Viewer, s: WebhooksPageState): Html {
  const created = s.endpoint.secretCreatedAt;
  return html`<section class="card" aria-labelledby="secret-title">
  <h2 id="secret-title">Signing secret</h2>
  <p>${created === null ? html`No secret yet. Saving an endpoint makes one.` : html`Created ${formatTime(created)}. It is stored encrypted and never shown again.`}</p>
  <form method="post" action="/webhooks/secret"${created === null ? "" : html` data-confirm="Make a new secret? The current one stops working at once: update your receiver."`}>
    ${csrfField(v)}<button type="submit">${created === null ? "Create secret" : "Rotate secret"}</button>
  </form>
</section>`;
}

function testCard(v: Viewer, s: WebhooksPageState): Html {
  return html`<section class="card" aria-labelledby="test-title">
  <h2 id="test-title">Test</h2>
  <form method="post" action="/webhooks/test" class="row">
    ${csrfField(v)}<button type="submit"${s.endpoint.url ? "" : " disabled"}>Send test event</button>
    <span class="muted">A <code>webhook.test</code> event to your endpoint, signed like the real ones.</span>
  </form>
</section>`;
}

function stateBadge(d: WebhookDeliveryRow): Html {
  if (d.state === "delivered") return html`<span class="status ok">delivered</span>`;
  if (d.state === "failed") return html`<span class="status bad">failed</span>`;
  return html`<span class="status warn">pending</span>`;
}

function attemptLine(a: WebhookAttemptRow): Html {
  const code = a.status === null ? "no answer" : String(a.status);
  const what = a.error === null ? html`<span class="status ok">${code}</span>` : html`<span class="status bad">${code}</span> ${a.error}`;
  return html`<li>${formatTime(a.attempted_at)} · ${a.duration_ms} ms · ${what}</li>`;
}

function sourceText(d: WebhookDeliveryRow): string {
  return d.source === "request" ? "the request's webhook_url" : d.source === "test" ? "the endpoint, a test event" : "the endpoint";
}

/** One delivery: a summary line (state, event, attempts, when), the details below it. */
function deliveryRow(view: DeliveryView, open: boolean): Html {
  const d = view.delivery;
  const when =
    d.state === "pending" ? html`next attempt ${formatTime(d.next_attempt_at)}` : html`${d.state === "delivered" ? "delivered" : "ended"} ${formatTime(d.finished_at)}`;
  const count = view.attempts.length;
  return html`<tr><td>
  <details${open ? " open" : ""}>
    <summary>${stateBadge(d)} <span class="mono">${d.event_type}</span> · ${count} ${count === 1 ? "attempt" : "attempts"} · <span class="muted">${when}</span></summary>
    <dl class="kv">
      <dt>Event id</dt><dd class="mono">${d.event_id}</dd>
      <dt>Sent to</dt><dd><span class="mono">${d.url}</span> <span class="muted">(${sourceText(d)})</span></dd>
      ${d.state === "failed" && d.last_error ? html`<dt>Why it ended</dt><dd>${d.last_error}</dd>` : ""}
      <dt>Attempts</dt><dd>${count === 0 ? html`<span class="muted">none yet</span>` : html`<ol class="attempts">${view.attempts.map(attemptLine)}</ol>`}</dd>
    </dl>
  </details>
</td></tr>`;
}

/** "12 seconds", "35 minutes", "about 28 hours": the span of the retry schedule. */
function spanText(ms: number): string {
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} seconds`;
  if (ms < 120_000) return `${Math.round(ms / 1000)} seconds`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} minutes`;
  return `about ${Math.round(ms / 3_600_000)} hours`;
}

export function webhooksPage(v: Viewer, s: WebhooksPageState): Html {
  return page({
    title: "Webhooks",
    section: "webhooks",
    viewer: v,
    body: html`<h1>Webhooks</h1>
<p>When an image task ends, Atelier sends an <code>image.task.succeeded</code>, <code>image.task.failed</code> or <code>image.task.canceled</code>
event to your endpoint (and to a request's own <code>webhook_url</code>): a POST of <code>{"type", "timestamp", "data": &lt;the task&gt;}</code>
signed by the <a href="https://www.standardwebhooks.com/">Standard Webhooks</a> scheme (headers <code>webhook-id</code>, <code>webhook-timestamp</code>,
<code>webhook-signature</code>). Any answer but a 2xx is retried: ${s.schedule.attempts} attempts over ${spanText(s.schedule.spanMs)}; <code>webhook-id</code>
stays the same, so ignore an id you have seen.</p>
${message("error", s.error)}${message("notice", s.notice)}
${s.secret ? newSecret(s.secret) : ""}
${endpointCard(v, s)}
${secretCard(v, s)}
${testCard(v, s)}
<section class="card" aria-labelledby="deliveries-title">
  <h2 id="deliveries-title">Recent deliveries</h2>
  ${
    s.deliveries.length === 0
      ? html`<p class="muted">No deliveries yet.</p>`
      : html`<table class="deliveries"><tbody>${s.deliveries.map((d, i) => deliveryRow(d, i === 0))}</tbody></table>`
  }
</section>`,
  });
}
