/**
 * The gallery: the signed-in user's kept images (newest first, paged), one image's page, its
 * thumbnail (made on the fly, cached; see core/imageThumbnails) and Delete, which removes the
 * image row and, when no other row has the same bytes, its file. The request history and the
 * ledger are untouched: the credits were spent on the generation, not the storage.
 */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import type { GalleryImage } from "../../core/imageGallery";
import { GALLERY_PAGE_SIZE, galleryImagePage, galleryPage, parseGalleryPage, type GalleryItem } from "../../workbench/pages/gallery";
import type { Viewer } from "../../workbench/layout";
import { workbenchGuards } from "./guards";
import { formFields, htmlResponse, problemPage, redirect } from "./respond";

const hide = { detail: { hide: true } };
const IMAGE_ID = /^img_[A-Za-z0-9]{1,64}$/;

/** Where a delete returns to: only the gallery's own pages. */
function backTo(raw: string | undefined): string {
  return raw && /^\/gallery(\?page=\d{1,6})?$/.test(raw) ? raw : "/gallery";
}

function withNotice(path: string, notice: string): string {
  return `${path}${path.includes("?") ? "&" : "?"}done=${notice}`;
}

export function galleryRoutes(services: Services) {
  const { store, clock, imageLinks, images, thumbnails } = services;
  const item = async (image: GalleryImage): Promise<GalleryItem> => ({ image, link: (await imageLinks.pathFor(image)).path });
  const notFound = (viewer: Viewer) => problemPage(viewer, 404, viewer.t("gallery.notFound.title"), viewer.t("gallery.notFound.text"));

  return new Elysia({ name: "workbench.gallery" })
    .use(workbenchGuards(services))
    .get("/gallery", async ({ viewer, query }) => {
      const userId = viewer.user.id;
      const now = clock();
      const page = parseGalleryPage(query.page);
      const rows = await store.images.listForUser(userId, now, GALLERY_PAGE_SIZE, (page - 1) * GALLERY_PAGE_SIZE);
      const total = await store.images.countForUser(userId, now);
      // Past the last page (its last image was just deleted): the last page that has images.
      if (rows.length === 0 && total > 0 && page > 1) {
        const last = Math.ceil(total / GALLERY_PAGE_SIZE);
        return redirect(query.done ? withNotice(`/gallery?page=${last}`, query.done === "deleted" ? "deleted" : "gone") : `/gallery?page=${last}`);
      }
      const notice = query.done === "deleted" ? viewer.t("gallery.notice.deleted") : query.done === "gone" ? viewer.t("gallery.notice.gone") : null;
      return htmlResponse(galleryPage(viewer, { items: await Promise.all(rows.map(item)), page, total, notice }));
    }, { viewer: true, ...hide })
    .get("/gallery/thumb/:id", async ({ viewer, params, request }) => {
      const image = IMAGE_ID.test(params.id) ? await store.images.getForUser(params.id, viewer.user.id, clock()) : null;
      if (!image) return new Response("Not found", { status: 404, headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" } });
      const thumb = await thumbnails.thumbnailOf(image);
      if (!thumb) return new Response("Not found", { status: 404, headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" } });
      // private: behind the session cookie; a day is plenty (the bytes under an id never change).
      const headers = { etag: thumb.etag, "cache-control": "private, max-age=86400", "x-content-type-options": "nosniff" };
      if (request.headers.get("if-none-match") === thumb.etag) return new Response(null, { status: 304, headers });
      return new Response(thumb.bytes as Uint8Array<ArrayBuffer>, { headers: { ...headers, "content-type": thumb.mime, "content-length": String(thumb.bytes.byteLength) } });
    }, { viewer: true, ...hide })
    .get("/gallery/:id", async ({ viewer, params }) => {
      const image = IMAGE_ID.test(params.id) ? await store.images.getForUser(params.id, viewer.user.id, clock()) : null;
      return image ? htmlResponse(galleryImagePage(viewer, await item(image))) : notFound(viewer);
    }, { viewer: true, ...hide })
    .post("/gallery/:id/delete", async ({ viewer, params, body }) => {
      const back = backTo(formFields(body).back);
      const deleted = IMAGE_ID.test(params.id) && (await images.deleteForUser(params.id, viewer.user.id));
      return redirect(withNotice(back, deleted ? "deleted" : "gone"));
    }, { viewer: true, ...hide });
}
