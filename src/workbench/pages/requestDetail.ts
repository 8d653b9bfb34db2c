/** One request of the viewer's history: everything the history keeps about it, and its image. */
import type { RequestRow } from "../../store/requests";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";
import { page, type Viewer } from "../layout";

export interface RequestDetailState {
  request: RequestRow;
  /** The key that made it ("name (prefix…)"), or null for the signed-in workbench. */
  keyLabel: string | null;
  /** The kept image's id, when there is one. */
  imageId: string | null;
}

const ms = (v: number | null) => (v === null ? "—" : v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v} ms`);

const STATUS_CLASS: Record<RequestRow["status"], string> = { pending: "warn", succeeded: "ok", failed: "bad", interrupted: "bad" };

function credits(t: Translator, r: RequestRow): Html {
  if (r.credits_charged === 0) return html`<span class="muted">${t("requestDetail.credits.free")}</span>`;
  const charged = t("requestDetail.credits.charged", { count: r.credits_charged });
  if (r.credits_refunded > 0) return html`${charged}, <span class="status ok">${t("requestDetail.credits.refunded", { count: r.credits_refunded })}</span>`;
  return html`${charged}`;
}

export function requestDetailPage(v: Viewer, s: RequestDetailState): Html {
  const t = v.t;
  const r = s.request;
  const tokens = r.prompt_tokens === null && r.completion_tokens === null ? "—" : t("requestDetail.tokens.value", { prompt: r.prompt_tokens ?? 0, completion: r.completion_tokens ?? 0 });
  return page({
    title: t("requestDetail.title", { id: r.id }),
    section: "credits",
    viewer: v,
    body: html`<p><a href="/credits">${t("requestDetail.back")}</a></p>
<h1>${t.html("requestDetail.title", { id: html`<span class="mono id-break">${r.id}</span>` })}</h1>
<div class="request-detail">
<section class="card">
  <dl class="kv" data-testid="request-facts">
    <dt>${t("requestDetail.status")}</dt><dd><span class="status ${STATUS_CLASS[r.status]}" data-testid="request-status">${t(`history.status.${r.status}`)}</span></dd>
    <dt>${t("requestDetail.time")}</dt><dd>${formatTime(r.created_at)}</dd>
    <dt>${t("requestDetail.finished")}</dt><dd>${formatTime(r.finished_at)}</dd>
    <dt>${t("requestDetail.endpoint")}</dt><dd class="mono">${r.endpoint}</dd>
    <dt>${t("requestDetail.model")}</dt><dd class="mono">${r.model}</dd>
    <dt>${t("requestDetail.key")}</dt><dd data-testid="request-key">${s.keyLabel ?? html`<span class="muted">${t("requestDetail.workbench")}</span>`}</dd>
    <dt>${t("requestDetail.credits")}</dt><dd data-testid="request-credits">${credits(t, r)}</dd>
    <dt>${t("requestDetail.queue")}</dt><dd>${ms(r.queue_ms)}</dd>
    <dt>${t("requestDetail.generation")}</dt><dd>${ms(r.generation_ms)}</dd>
    ${
      // Which upstream served it, and how, is for admins (issue 16): users see the outcome.
      v.user.role === "admin"
        ? html`<dt>${t("requestDetail.upstreamLatency")}</dt><dd>${ms(r.upstream_latency_ms)}</dd>
    <dt>${t("requestDetail.upstream")}</dt><dd class="mono" data-testid="request-upstream">${r.upstream_id ?? "—"}</dd>
    <dt>${t("requestDetail.attempts")}</dt><dd>${r.attempts ?? "—"}</dd>`
        : ""
    }
    <dt>${t("requestDetail.tokens")}</dt><dd>${tokens}</dd>
    ${r.error_code ? html`<dt>${t("requestDetail.error")}</dt><dd class="error-cell"><span class="mono">${r.error_code}</span>: ${r.error_message ?? ""}</dd>` : ""}
    ${
      // The engine's own words about the failure are for admins too (issue 16).
      v.user.role === "admin" && r.error_detail
        ? html`<dt>${t("requestDetail.errorDetail")}</dt><dd class="error-cell mono" data-testid="error-detail">${r.error_detail}</dd>`
        : ""
    }
  </dl>
</section>
<section class="card">
  <h2>${t("requestDetail.prompt")}</h2>
  <p class="prompt-text">${r.prompt ?? html`<span class="muted">—</span>`}</p>
  ${
    s.imageId
      ? html`<a href="/gallery/${s.imageId}" class="detail-image" data-testid="request-image"><img src="/gallery/thumb/${s.imageId}" alt="${t("requestDetail.image.alt")}" width="256" height="256"></a>`
      : r.kind === "image" && r.status === "succeeded"
        ? html`<p class="muted">${t("requestDetail.image.gone")}</p>`
        : ""
  }
</section>
</div>`,
  });
}
