/** The gallery: the user's kept images as thumbnails, newest first, paged; one image's page. */
import { formatBytes, type GalleryImage } from "../../core/imageGallery";
import { IMAGE_EXTENSIONS } from "../../core/imageArchive";
import { formatTime, html, type Html } from "../html";
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
  const { image, link } = item;
  return html`<div class="gallery-actions">
  <a class="button small" href="${link}" download="${downloadName(image)}" data-testid="download">Download</a>
  <button type="button" class="small" data-copy-link="${link}">Copy link</button>
  <form method="post" action="/gallery/${image.id}/delete" class="inline" data-confirm="Delete this image? Its links stop working; your credits and history stay as they are.">
    ${csrfField(v)}<input type="hidden" name="back" value="${back}">
    <button type="submit" class="small danger" aria-label="Delete image ${image.id}">Delete</button>
  </form>
</div>`;
}

function tile(v: Viewer, item: GalleryItem, back: string): Html {
  const { image } = item;
  const prompt = image.prompt ?? "";
  return html`<li class="gallery-item" data-image-id="${image.id}">
  <a class="thumb" href="/gallery/${image.id}" aria-label="Open image: ${truncate(prompt, 80) || image.id}">
    <img src="/gallery/thumb/${image.id}" alt="${truncate(prompt, 120)}" width="${thumbSize(image).w}" height="${thumbSize(image).h}" loading="lazy" decoding="async">
  </a>
  <p class="gallery-prompt" title="${prompt}">${prompt ? truncate(prompt, 90) : html`<span class="muted">(no prompt)</span>`}</p>
  <p class="gallery-meta muted"><span class="mono">${image.model ?? "—"}</span> · ${image.width}×${image.height} <time datetime="${new Date(image.createdAt).toISOString()}">${formatTime(image.createdAt).slice(0, 16)}</time></p>
  ${actions(v, item, back)}
</li>`;
}

/** The thumbnail's intrinsic size (reserves its box before it loads). */
function thumbSize(image: GalleryImage): { w: number; h: number } {
  const scale = Math.min(1, 256 / Math.max(image.width, image.height));
  return { w: Math.max(1, Math.round(image.width * scale)), h: Math.max(1, Math.round(image.height * scale)) };
}

function pager(current: number, total: number): Html {
  const pages = Math.max(1, Math.ceil(total / GALLERY_PAGE_SIZE));
  return html`<nav class="pager" aria-label="Pages">
  ${current > 1 ? html`<a href="/gallery?page=${Math.min(current - 1, pages)}" rel="prev">← Newer</a>` : html`<span class="muted">← Newer</span>`}
  <span>Page ${current} of ${pages} · ${total} image${total === 1 ? "" : "s"}</span>
  ${current < pages ? html`<a href="/gallery?page=${current + 1}" rel="next">Older →</a>` : html`<span class="muted">Older →</span>`}
</nav>`;
}

export function galleryPage(v: Viewer, s: GalleryPageState): Html {
  const back = `/gallery?page=${s.page}`;
  return page({
    title: "Gallery",
    section: "gallery",
    viewer: v,
    scripts: ["gallery.js"],
    body: html`<h1>Gallery</h1>
${message("error", s.error)}${message("notice", s.notice)}
<section class="card">
  ${
    s.items.length === 0
      ? html`<p class="muted">${s.total === 0 ? html`No images yet. Make one in the <a href="/playground">playground</a> or through the API; every generated image is kept here.` : "No images on this page."}</p>`
      : html`<ul class="gallery-grid" aria-label="Your images, newest first">${s.items.map((i) => tile(v, i, back))}</ul>`
  }
  ${pager(s.page, s.total)}
</section>`,
  });
}

export function galleryImagePage(v: Viewer, item: GalleryItem): Html {
  const { image, link } = item;
  return page({
    title: "Image",
    section: "gallery",
    viewer: v,
    scripts: ["gallery.js"],
    body: html`<p><a href="/gallery">← Gallery</a></p>
<h1>Image</h1>
<section class="card gallery-detail" data-image-id="${image.id}">
  <img src="${link}" alt="${truncate(image.prompt ?? "", 120)}" width="${image.width}" height="${image.height}">
  <div>
    <dl class="facts">
      <dt>Prompt</dt><dd class="gallery-full-prompt">${image.prompt ?? html`<span class="muted">—</span>`}</dd>
      <dt>Model</dt><dd class="mono">${image.model ?? "—"}</dd>
      <dt>Size</dt><dd>${image.width}×${image.height} · ${formatBytes(image.bytes)}</dd>
      <dt>Created</dt><dd>${formatTime(image.createdAt)}</dd>
      <dt>Kept until</dt><dd>${image.expiresAt === null ? "the storage limit needs the space" : formatTime(image.expiresAt)}</dd>
      <dt>Image id</dt><dd class="mono">${image.id}</dd>
      <dt>Request</dt><dd class="mono">${image.requestId}</dd>
    </dl>
    ${actions(v, item, "/gallery")}
  </div>
</section>`,
  });
}
