/** The gallery: the user's kept images as thumbnails, newest first, paged; one image's page. */
import { formatBytes, type GalleryImage } from "../../core/imageGallery";
import { IMAGE_EXTENSIONS } from "../../core/imageArchive";
import { formatTime, html, type Html } from "../html";
import type { Translator } from "../i18n";
import { csrfField, message, page, type Viewer } from "../layout";

export const GALLERY_PAGE_SIZE = 24;

/** What the page needs per image besides its row: the signed links (made by the route). */
export interface GalleryItem {
  image: GalleryImage;
  /** A signed `/files/images/…` path (relative; the browser makes it absolute). */
  link: string;
}

export interface GalleryPageState {
  items: GalleryItem[];
  page: number;
  total: number;
  notice?: string | null;
  error?: string | null;
}

/** The page number from `?page=`; anything else is page 1. */
export function parseGalleryPage(raw: string | undefined): number {
  const n = Number(raw);
  return Number.isInteger(n) && n >= 1 && n <= 100_000 ? n : 1;
}

export function downloadName(image: GalleryImage): string {
  return `atelier-${image.id}.${IMAGE_EXTENSIONS[image.mime]}`;
}

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function actions(v: Viewer, item: GalleryItem, back: string): Html {
  const t = v.t;
  const { image, link } = item;
  return html`<div class="gallery-actions">
  <a class="button small" href="${link}" download="${downloadName(image)}" data-testid="download">${t("gallery.download")}</a>
  <button type="button" class="small" data-copy-link="${link}">${t("gallery.copyLink")}</button>
  <form method="post" action="/gallery/${image.id}/delete" class="inline" data-confirm="${t("gallery.deleteConfirm")}">
    ${csrfField(v)}<input type="hidden" name="back" value="${back}">
    <button type="submit" class="small danger" aria-label="${t("gallery.deleteLabel", { id: image.id })}">${t("gallery.delete")}</button>
  </form>
</div>`;
}

function tile(v: Viewer, item: GalleryItem, back: string): Html {
  const { image } = item;
  const prompt = image.prompt ?? "";
  const t = v.t;
  return html`<li class="gallery-item" data-image-id="${image.id}">
  <a class="thumb" href="/gallery/${image.id}" aria-label="${t("gallery.open", { name: truncate(prompt, 80) || image.id })}">
    <img src="/gallery/thumb/${image.id}" alt="${truncate(prompt, 120)}" width="${thumbSize(image).w}" height="${thumbSize(image).h}" loading="lazy" decoding="async">
  </a>
  <p class="gallery-prompt" title="${prompt}">${prompt ? truncate(prompt, 90) : html`<span class="muted">${t("gallery.noPrompt")}</span>`}</p>
  <p class="gallery-meta muted"><span class="mono">${image.model ?? "—"}</span> · ${image.width}×${image.height} <time datetime="${new Date(image.createdAt).toISOString()}">${formatTime(image.createdAt).slice(0, 16)}</time></p>
  ${actions(v, item, back)}
</li>`;
}

/** The thumbnail's intrinsic size (reserves its box before it loads). */
function thumbSize(image: GalleryImage): { w: number; h: number } {
  const scale = Math.min(1, 256 / Math.max(image.width, image.height));
  return { w: Math.max(1, Math.round(image.width * scale)), h: Math.max(1, Math.round(image.height * scale)) };
}

function pager(t: Translator, current: number, total: number): Html {
  const pages = Math.max(1, Math.ceil(total / GALLERY_PAGE_SIZE));
  return html`<nav class="pager" aria-label="${t("common.pager.label")}">
  ${current > 1 ? html`<a href="/gallery?page=${Math.min(current - 1, pages)}" rel="prev">${t("common.pager.newer")}</a>` : html`<span class="muted">${t("common.pager.newer")}</span>`}
  <span>${t.plural("gallery.pager.summary", total, { page: current, pages })}</span>
  ${current < pages ? html`<a href="/gallery?page=${current + 1}" rel="next">${t("common.pager.older")}</a>` : html`<span class="muted">${t("common.pager.older")}</span>`}
</nav>`;
}

export function galleryPage(v: Viewer, s: GalleryPageState): Html {
  const back = `/gallery?page=${s.page}`;
  const t = v.t;
  return page({
    title: t("gallery.title"),
    section: "gallery",
    viewer: v,
    scripts: ["gallery.js"],
    body: html`<h1>${t("gallery.title")}</h1>
${message("error", s.error)}${message("notice", s.notice)}
<section class="card">
  ${
    s.items.length === 0
      ? html`<p class="muted">${s.total === 0 ? t.html("gallery.empty") : t("gallery.emptyPage")}</p>`
      : html`<ul class="gallery-grid" aria-label="${t("gallery.listLabel")}">${s.items.map((i) => tile(v, i, back))}</ul>`
  }
  ${pager(t, s.page, s.total)}
</section>`,
  });
}

export function galleryImagePage(v: Viewer, item: GalleryItem): Html {
  const { image, link } = item;
  const t = v.t;
  return page({
    title: t("gallery.image.title"),
    section: "gallery",
    viewer: v,
    scripts: ["gallery.js"],
    body: html`<p><a href="/gallery">${t("gallery.back")}</a></p>
<h1>${t("gallery.image.title")}</h1>
<section class="card gallery-detail" data-image-id="${image.id}">
  <img src="${link}" alt="${truncate(image.prompt ?? "", 120)}" width="${image.width}" height="${image.height}">
  <div>
    <dl class="facts">
      <dt>${t("gallery.fact.prompt")}</dt><dd class="gallery-full-prompt">${image.prompt ?? html`<span class="muted">—</span>`}</dd>
      <dt>${t("gallery.fact.model")}</dt><dd class="mono">${image.model ?? "—"}</dd>
      <dt>${t("gallery.fact.size")}</dt><dd>${image.width}×${image.height} · ${formatBytes(image.bytes)}</dd>
      <dt>${t("gallery.fact.created")}</dt><dd>${formatTime(image.createdAt)}</dd>
      <dt>${t("gallery.fact.keptUntil")}</dt><dd>${image.expiresAt === null ? t("gallery.fact.keptUntilSpace") : formatTime(image.expiresAt)}</dd>
      <dt>${t("gallery.fact.imageId")}</dt><dd class="mono">${image.id}</dd>
      <dt>${t("gallery.fact.request")}</dt><dd class="mono">${image.requestId}</dd>
    </dl>
    ${actions(v, item, "/gallery")}
  </div>
</section>`,
  });
}
