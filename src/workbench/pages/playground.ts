/**
 * The playground: image generation (with reference images), image edit (image + painted or
 * uploaded mask) and chat. The forms are plain HTML; /assets/playground.js sends them to the
 * same /v1 endpoints with the session and the CSRF header, streamed (previews as they arrive) or
 * as a background task, and reattaches to a running one after a reload.
 */
import type { CatalogModel } from "../../core/models";
import { html, jsonForScript, type Html } from "../html";
import type { Translator } from "../i18n";
import { page, type Viewer } from "../layout";
import { MAX_IMAGE_BYTES, MAX_PROMPT_CHARS, MAX_REFERENCE_IMAGES } from "../../core/limits";

export const DEFAULT_SIZES = ["1024x1024", "1536x1024", "1024x1536", "512x512", "256x256", "auto"];
export const DEFAULT_QUALITIES = ["auto", "low", "medium", "high"];

export interface PlaygroundModel {
  id: string;
  sizes: string[];
  qualities: string[];
  /** Its engine's edits keep the image's size: the Edit tab hides Size for it and sends none. */
  editKeepsSize: boolean;
  /** Credits one request costs (the model's configured price), shown in the model picker. */
  price: number;
}

/** Whether a model's engine ignores `size` on edits (ImageEngine.editKeepsImageSize). */
export type EditKeepsSize = (model: CatalogModel) => boolean;

export function playgroundModels(models: CatalogModel[], editKeepsSize: EditKeepsSize = () => false): { image: PlaygroundModel[]; chat: string[] } {
  return {
    image: models
      .filter((m) => m.kind === "image")
      .map((m) => ({ id: m.id, sizes: m.sizes ?? DEFAULT_SIZES, qualities: m.qualities ?? DEFAULT_QUALITIES, editKeepsSize: editKeepsSize(m), price: m.price })),
    chat: models.filter((m) => m.kind === "chat").map((m) => m.id),
  };
}

function options(values: string[], selected?: string): Html[] {
  return values.map((v) => html`<option value="${v}"${v === selected ? html` selected` : ""}>${v}</option>`);
}

/**
 * Model, size and quality. On the Edit tab (`forEdit`) a model whose engine keeps the image's
 * size shows that instead of a Size selector it would ignore; playground.js keeps this in step
 * when the model changes.
 */
/** The submit button's words for a price ("Generate (2 credits)"); each model option carries its own, for playground.js. */
function submitLabel(t: Translator, forEdit: boolean, price: number): string {
  return forEdit ? t.plural("playground.edit.submit", price) : t.plural("playground.generate", price);
}

function imageFields(t: Translator, prefix: string, m: { image: PlaygroundModel[] }, defaultModel: string | undefined, forEdit = false): Html {
  const first = m.image.find((x) => x.id === defaultModel) ?? m.image[0];
  const modelOptions = m.image.map(
    (x) => html`<option value="${x.id}"${x.id === first?.id ? html` selected` : ""} data-submit-label="${submitLabel(t, forEdit, x.price)}">${t.plural("playground.modelOption", x.price, { model: x.id })}</option>`,
  );
  const keepsSize = forEdit && first?.editKeepsSize === true;
  return html`<div class="grid3">
    <div><label for="${prefix}-model">${t("playground.model")}</label>
      <select id="${prefix}-model" name="model" data-model-select>${modelOptions}</select></div>
    <div data-size-field${keepsSize ? html` hidden` : ""}><label for="${prefix}-size">${t("playground.size")}</label>
      <select id="${prefix}-size" name="size" data-size-select>${options(first?.sizes ?? DEFAULT_SIZES, first?.sizes.includes("1024x1024") ? "1024x1024" : undefined)}</select></div>
    ${forEdit ? html`<div data-size-kept${keepsSize ? "" : html` hidden`}><span class="label-like">${t("playground.size")}</span><p class="muted" id="${prefix}-size-kept">${t("playground.edit.sizeKept")}</p></div>` : ""}
    <div><label for="${prefix}-quality">${t("playground.quality")}</label>
      <select id="${prefix}-quality" name="quality" data-quality-select>${options(first?.qualities ?? DEFAULT_QUALITIES)}</select></div>
  </div>`;
}

/**
 * Where a request's outcome appears: its status (queue position, progress, previews as they
 * arrive; a Cancel button for a background task), the final image or the error. Screen readers
 * hear the coarse changes from the one live region ([data-announce]), not every poll.
 */
function resultPanel(t: Translator, prefix: string): Html {
  return html`<div class="result" id="${prefix}-result">
  <p class="msg error" role="alert" hidden data-error></p>
  <div class="task-progress" hidden data-busy>
    <div class="row">
      <span class="spinner" aria-hidden="true"></span>
      <span id="${prefix}-status" data-status>${t("playground.result.generating")}</span>
      <button type="button" class="small" hidden data-cancel>${t("playground.result.cancel")}</button>
    </div>
    <progress id="${prefix}-progress" max="100" aria-label="${t("playground.result.progress")}" aria-describedby="${prefix}-status" data-progress></progress>
  </div>
  <p class="visually-hidden" role="status" aria-live="polite" data-announce></p>
  <figure class="preview" hidden data-preview>
    <img alt="" data-partial>
    <figcaption class="muted" data-preview-caption></figcaption>
  </figure>
  <figure hidden data-figure>
    <img alt="${t("playground.result.alt")}" data-image>
    <figcaption>
      <span data-meta></span>
      <a class="button" data-download download="atelier.png" href="#">${t("playground.result.download")}</a>
    </figcaption>
  </figure>
</div>`;
}

function backgroundChoice(t: Translator, prefix: string): Html {
  return html`<div class="check">
      <input type="checkbox" id="${prefix}-background" name="background" data-background>
      <label for="${prefix}-background">${t("playground.background")} <span class="muted">${t("playground.background.hint")}</span></label>
    </div>`;
}

/** The price of the model a form opens with (the default image model, else the first); 1 without any. */
function firstPrice(m: { image: PlaygroundModel[] }, defaultModel: string | undefined): number {
  return (m.image.find((x) => x.id === defaultModel) ?? m.image[0])?.price ?? 1;
}

export function playgroundPage(v: Viewer, models: CatalogModel[], defaultImageModel: string | undefined, editKeepsSize?: EditKeepsSize): Html {
  const m = playgroundModels(models, editKeepsSize);
  const noImage = m.image.length === 0;
  const t = v.t;
  return page({
    title: t("playground.title"),
    section: "playground",
    viewer: v,
    scripts: ["playground.js"],
    body: html`<h1>${t("playground.title")}</h1>
<p class="muted">${t.html("playground.intro")}</p>
<script type="application/json" id="playground-config">${jsonForScript({ models: m.image, maxReferences: MAX_REFERENCE_IMAGES, maxBytes: MAX_IMAGE_BYTES, chatStorageKey: `atelier.chat.${v.user.id}`, taskStorageKey: `atelier.playground.task.${v.user.id}` })}</script>
<div class="tabs" role="tablist" aria-label="${t("playground.modes")}">
  <button type="button" role="tab" id="tab-generate" aria-controls="panel-generate" aria-selected="true">${t("playground.tab.generate")}</button>
  <button type="button" role="tab" id="tab-edit" aria-controls="panel-edit" aria-selected="false" tabindex="-1">${t("playground.tab.edit")}</button>
  <button type="button" role="tab" id="tab-chat" aria-controls="panel-chat" aria-selected="false" tabindex="-1">${t("playground.tab.chat")}</button>
</div>

<section class="card" role="tabpanel" id="panel-generate" aria-labelledby="tab-generate">
  ${noImage ? html`<p class="msg error">${t("playground.noImageModel")}</p>` : ""}
  <form id="generate-form" class="stack" novalidate>
    <label for="gen-prompt">${t("playground.prompt")}</label>
    <textarea id="gen-prompt" name="prompt" rows="3" required maxlength="${MAX_PROMPT_CHARS}" placeholder="${t("playground.genPlaceholder")}"></textarea>
    ${imageFields(t, "gen", m, defaultImageModel)}
    <fieldset class="dropzone" data-dropzone>
      <legend>${t("playground.refs.legend")} <span class="muted">${t("playground.refs.hint", { max: MAX_REFERENCE_IMAGES })}</span></legend>
      <label for="gen-refs" class="drop-label">${t("playground.refs.drop")}</label>
      <input id="gen-refs" type="file" accept="image/png,image/jpeg,image/webp" multiple data-ref-input>
      <ul class="thumbs" data-ref-list aria-label="${t("playground.refs.list")}"></ul>
    </fieldset>
    ${backgroundChoice(t, "gen")}
    <p class="msg error" role="alert" hidden data-form-error></p>
    <button type="submit" class="primary"${noImage ? html` disabled` : ""}>${submitLabel(t, false, firstPrice(m, defaultImageModel))}</button>
  </form>
  ${resultPanel(t, "gen")}
</section>

<section class="card" role="tabpanel" id="panel-edit" aria-labelledby="tab-edit" hidden>
  <form id="edit-form" class="stack" novalidate>
    <label for="edit-image">${t("playground.edit.image")} <span class="muted">${t("playground.edit.imageHint")}</span></label>
    <input id="edit-image" type="file" accept="image/png,image/jpeg,image/webp" data-edit-image>
    <div class="mask-editor" data-mask-editor hidden>
      <p class="muted">${t("playground.edit.paint")}</p>
      <div class="canvas-wrap"><canvas data-preview aria-label="${t("playground.edit.canvas")}"></canvas><canvas data-mask class="mask-layer" aria-label="${t("playground.edit.maskCanvas")}"></canvas></div>
      <div class="row">
        <label for="edit-brush">${t("playground.edit.brush")}</label><input id="edit-brush" type="range" min="4" max="120" value="40" data-brush>
        <button type="button" data-clear-mask>${t("playground.edit.clear")}</button>
      </div>
    </div>
    <label for="edit-mask">${t("playground.edit.maskFile")} <span class="muted">${t("playground.edit.maskHint")}</span></label>
    <input id="edit-mask" type="file" accept="image/png" data-mask-file>
    <label for="edit-prompt">${t("playground.prompt")}</label>
    <textarea id="edit-prompt" name="prompt" rows="3" required maxlength="${MAX_PROMPT_CHARS}" placeholder="${t("playground.edit.placeholder")}"></textarea>
    ${imageFields(t, "edit", m, defaultImageModel, true)}
    ${backgroundChoice(t, "edit")}
    <p class="msg error" role="alert" hidden data-form-error></p>
    <button type="submit" class="primary"${noImage ? html` disabled` : ""}>${submitLabel(t, true, firstPrice(m, defaultImageModel))}</button>
  </form>
  ${resultPanel(t, "edit")}
</section>

<section class="card" role="tabpanel" id="panel-chat" aria-labelledby="tab-chat" hidden>
  <form id="chat-form" class="stack" novalidate>
    <label for="chat-model">${t("playground.model")}</label>
    <select id="chat-model" name="model">${options(m.chat)}</select>
    <ol class="chat-log" data-chat-log aria-label="${t("playground.chat.log")}" aria-live="polite"></ol>
    <label for="chat-input">${t("playground.chat.message")}</label>
    <textarea id="chat-input" name="message" rows="3" required placeholder="${t("playground.chat.placeholder")}"></textarea>
    <p class="msg error" role="alert" hidden data-form-error></p>
    <div class="row"><button type="submit" class="primary"${m.chat.length === 0 ? html` disabled` : ""}>${t("playground.chat.send")}</button><button type="button" data-chat-reset>${t("playground.chat.reset")}</button></div>
  </form>
</section>`,
  });
}
