/** Admin · Codes: make a batch of redemption codes (shown once, with its CSV) and list batches. */
import { batchCsv, type CreatedBatch, type RedemptionBatchSummary } from "../../core/redemptionCodes";
import { MAX_CODE_BATCH_NAME_CHARS, MAX_CODE_BATCH_SIZE, MAX_CODE_EXPIRY_DAYS, MAX_CREDIT_GRANT } from "../../core/limits";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";
import { csrfField, message, type Viewer } from "../layout";
import { adminPage } from "./admin";

/** The form's fields as typed, kept after a refusal. */
export interface BatchForm {
  name?: string;
  credits?: string;
  count?: string;
  expires_days?: string;
}

export interface AdminCodesState {
  batches: RedemptionBatchSummary[];
  created?: CreatedBatch | null;
  form?: BatchForm;
  error?: string | null;
}

function createdBatch(t: Translator, c: CreatedBatch): Html {
  const csv = batchCsv(c);
  const file = `atelier-codes-batch-${c.batch.id}.csv`;
  // A data: link, so the CSV needs no second request: the codes exist only in this answer.
  // data-replace-url: a reload shows the list, it does not post the form (and make a batch) again.
  return html`<section class="card created-key" aria-labelledby="new-batch-title" data-replace-url="/admin/codes">
  <h2 id="new-batch-title">${t.plural("codes.created.heading", c.codes.length, { name: c.batch.name, credits: c.batch.credits })}</h2>
  <p class="msg warning" role="alert">${t.html("codes.created.warning")}</p>
  <p class="actions-row"><a class="button primary" href="data:text/csv;charset=utf-8,${encodeURIComponent(csv)}" download="${file}" data-testid="codes-csv">${t("codes.created.csv")}</a>
  <button type="button" data-copy="#new-codes">${t("codes.created.copy")}</button></p>
  <label class="visually-hidden" for="new-codes">${t("codes.created.label")}</label>
  <textarea id="new-codes" class="mono codes" readonly rows="${Math.min(c.codes.length, 10)}" data-testid="new-codes">${c.codes.join("\n")}</textarea>
</section>`;
}

function batchRow(t: Translator, b: RedemptionBatchSummary, now: number): Html {
  const expired = b.expires_at !== null && b.expires_at <= now;
  return html`<tr>
  <td>${b.name}</td>
  <td class="num">${b.credits}</td>
  <td class="num" data-testid="redeemed">${b.redeemed} / ${b.code_count}</td>
  <td class="nowrap">${b.expires_at === null ? html`<span class="muted">${t("codes.never")}</span>` : html`${expired ? html`<span class="status bad">${t("codes.expired")}</span> ` : ""}${formatTime(b.expires_at)}`}</td>
  <td>${b.created_by}</td>
  <td class="nowrap">${formatTime(b.created_at)}</td>
</tr>`;
}

export function adminCodesPage(v: Viewer, s: AdminCodesState, now: number): Html {
  const f = s.form ?? {};
  const t = v.t;
  return adminPage(
    v,
    "codes",
    html`${message("error", s.error)}
${s.created ? createdBatch(t, s.created) : ""}
<section class="card">
  <h2>${t("codes.new.heading")}</h2>
  <form method="post" action="/admin/codes" class="stack">
    ${csrfField(v)}
    <div class="row">
      <label for="batch-name">${t("codes.new.name")}</label>
      <input id="batch-name" name="name" type="text" required maxlength="${MAX_CODE_BATCH_NAME_CHARS}" placeholder="${t("codes.new.namePlaceholder")}" value="${f.name ?? ""}">
    </div>
    <div class="row">
      <label for="batch-credits">${t("codes.new.credits")}</label>
      <input id="batch-credits" name="credits" type="number" required min="1" max="${MAX_CREDIT_GRANT}" step="1" class="amount" value="${f.credits ?? ""}">
      <label for="batch-count">${t("codes.new.count")}</label>
      <input id="batch-count" name="count" type="number" required min="1" max="${MAX_CODE_BATCH_SIZE}" step="1" class="amount" value="${f.count ?? ""}">
      <label for="batch-expiry">${t("codes.new.expiry")}</label>
      <input id="batch-expiry" name="expires_days" type="number" min="1" max="${MAX_CODE_EXPIRY_DAYS}" step="1" class="days" placeholder="${t("codes.never")}" value="${f.expires_days ?? ""}">
    </div>
    <p class="muted">${t("codes.new.hint")}</p>
    <div class="row"><button type="submit" class="primary">${t("codes.new.submit")}</button></div>
  </form>
</section>
<section class="card">
  <h2>${t("codes.batches.heading")}</h2>
  ${
    s.batches.length === 0
      ? html`<p class="muted">${t("codes.batches.empty")}</p>`
      : html`<div class="table-wrap"><table class="batches">
    <thead><tr><th scope="col">${t("codes.col.name")}</th><th scope="col" class="num">${t("codes.col.credits")}</th><th scope="col" class="num">${t("codes.col.redeemed")}</th><th scope="col">${t("codes.col.expires")}</th><th scope="col">${t("codes.col.createdBy")}</th><th scope="col">${t("codes.col.created")}</th></tr></thead>
    <tbody>${s.batches.map((b) => batchRow(t, b, now))}</tbody>
  </table></div>`
  }
</section>`,
  );
}
