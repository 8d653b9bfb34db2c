/**
 * GET /files/images/{id}.{ext}?expires=…&signature=…: a kept image by its signed link
 * (core/imageLinks), without a key, so a browser or an `<img>` can show it. An altered or
 * expired link is 403 in our error shape; a valid link to an image retention has deleted, 404.
 * The bytes never change under an id: the ETag is their sha256, and caches may keep them
 * until the link expires.
 */
import { Elysia, t } from "elysia";
import type { ImageArchive } from "../core/imageArchive";
import { IMAGE_FILES_PATH, type ImageLinks } from "../core/imageLinks";
import type { Clock } from "../core/clock";
import { forbidden, notFound } from "./errors";
import { errorResponses, sharedModels } from "./shared";

export interface ImageFilesDeps {
  images: Pick<ImageArchive, "open">;
  imageLinks: Pick<ImageLinks, "check">;
  clock: Clock;
}

/** If-None-Match names this ETag (a list, `*`, or weak forms all count). */
function matchesETag(header: string | null, etag: string): boolean {
  if (header === null) return false;
  return header.split(",").some((v) => {
    const tag = v.trim().replace(/^W\//, "");
    return tag === "*" || tag === etag;
  });
}

/** 403 for a link that has expired or was altered (also the document's examples). */
export const imageLinkRefused = (reason: "malformed" | "expired" | "bad_signature") =>
  reason === "expired"
    ? forbidden("This image link has expired; request the image again for a fresh link.", "link_expired")
    : forbidden("This image link is not valid: its signature does not match its path and expiry.", "invalid_signature");

/** 404 for a valid link to an image that is gone. */
export const imageNotKept = () => notFound("This image is no longer kept (the retention period or the storage limit removed it).", null, "image_not_found");

export function imageFilesRoutes(deps: ImageFilesDeps) {
  return new Elysia({ name: "files.images", prefix: IMAGE_FILES_PATH })
    .use(sharedModels)
    .get(
      "/:file",
      async ({ params, query, request }) => {
        const link = await deps.imageLinks.check(params.file, query.expires ?? null, query.signature ?? null);
        if (!link.ok) {
          throw imageLinkRefused(link.reason);
        }
        const found = await deps.images.open(link.id);
        if (!found) throw imageNotKept();
        const etag = `"${found.image.sha256}"`;
        const maxAge = Math.max(0, Math.floor((Number(query.expires) * 1000 - deps.clock()) / 1000));
        const headers: Record<string, string> = {
          etag,
          "cache-control": `private, max-age=${maxAge}, immutable`,
          "x-content-type-options": "nosniff",
          "x-image-id": found.image.id,
        };
        if (matchesETag(request.headers.get("if-none-match"), etag)) return new Response(null, { status: 304, headers });
        return new Response(found.bytes as Uint8Array<ArrayBuffer>, {
          status: 200,
          headers: { ...headers, "content-type": found.image.mime, "content-length": String(found.bytes.byteLength), "content-disposition": `inline; filename="${params.file}"` },
        });
      },
      {
        params: t.Object({ file: t.String({ description: "`{image_id}.{png|jpg|webp}`, as in the link.", examples: ["img_4fQ8sJ2kLm9XbT1vYc0pRz7a.png"] }) }),
        query: t.Object({
          expires: t.Optional(t.String({ description: "Unix seconds after which the link stops working." })),
          signature: t.Optional(t.String({ description: "The link's signature (HMAC-SHA256, base64url)." })),
        }),
        response: errorResponses(403, 404, 503),
        detail: {
          tags: ["Images"],
          summary: "Download a kept image",
          description:
            "The link in `data[0].url` of a `response_format: url` answer. Needs no key: the signature is the permission, until `expires` (`[storage] url_ttl_s`, default 1 hour). " +
            "Answers the bytes with their Content-Type, Content-Length, an ETag (their sha256) and `Cache-Control: private, max-age=<seconds left>, immutable`; 304 on a matching If-None-Match. " +
            "403 `link_expired` or `invalid_signature` for an expired or altered link; 404 `image_not_found` once retention has deleted the image; 503 `storage_unavailable` while the image storage (an S3 bucket) does not answer.",
          operationId: "downloadImage",
          security: [],
          responses: {
            200: {
              description: "The image.",
              headers: {
                ETag: { schema: { type: "string" }, description: "The sha256 of the bytes, quoted." },
                "Cache-Control": { schema: { type: "string" } },
                "x-image-id": { schema: { type: "string" } },
              },
              content: {
                "image/png": { schema: { type: "string", format: "binary" } },
                "image/jpeg": { schema: { type: "string", format: "binary" } },
                "image/webp": { schema: { type: "string", format: "binary" } },
              },
            },
            304: { description: "Not modified (If-None-Match named the ETag)." },
          },
        },
      },
    );
}
