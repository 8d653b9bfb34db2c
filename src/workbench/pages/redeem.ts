/** The credits page's "Redeem a code" card: one field, its outcome shown above it. */
import { html, type Html } from "../html";
import { csrfField, message, type Viewer } from "../layout";

export interface RedeemState {
  error?: string | null;
  notice?: string | null;
  /** What the user typed, kept after a failure so a typo can be fixed in place. */
  code?: string;
}

export function redeemCard(v: Viewer, s: RedeemState = {}): Html {
  const t = v.t;
  return html`<section class="card" id="redeem" aria-labelledby="redeem-title">
  <h2 id="redeem-title">${t("codes.redeem.heading")}</h2>
  ${message("error", s.error)}${message("notice", s.notice)}
  <form method="post" action="/credits/redeem" class="row">
    ${csrfField(v)}
    <label for="redeem-code">${t("codes.redeem.code")}</label>
    <input id="redeem-code" name="code" type="text" required maxlength="100" autocomplete="off" autocapitalize="characters" spellcheck="false" class="mono" placeholder="XXXXX-XXXXX-XXXXX-XXXXX" value="${s.code ?? ""}">
    <button type="submit" class="primary">${t("codes.redeem.submit")}</button>
  </form>
</section>`;
}
