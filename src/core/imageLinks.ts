/**
 * Signed, expiring links to archived images: `/files/images/{id}.{ext}?expires=…&signature=…`,
 * where signature = base64url(HMAC-SHA256(secret, "{id}.{ext}\n{expires}")) and expires is in
 * Unix seconds. Whoever holds the link may fetch the image without a key until it expires; a
 * change to the id, the extension, the time or the signature makes it invalid.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import type { Clock } from "./clock";
import { IMAGE_EXTENSIONS, type ArchivedImage } from "./imageArchive";

export const IMAGE_FILES_PATH = "/files/images";

export type LinkCheck = { ok: true; id: string } | { ok: false; reason: "malformed" | "expired" | "bad_signature" };

export class ImageLinks {
  constructor(
    /** The signing key; the first call may read (or make) it in the database, later ones reuse it. */
    private readonly secret: () => Promise<Uint8Array>,
    private readonly ttlMs: number,
    private readonly clock: Clock,
  ) {}

  /** The link's path and query (the caller puts its origin in front). */
  async pathFor(image: Pick<ArchivedImage, "id" | "mime">): Promise<{ path: string; expiresAt: number }> {
    const file = `${image.id}.${IMAGE_EXTENSIONS[image.mime]}`;
    const expires = Math.floor((this.clock() + this.ttlMs) / 1000);
    return { path: `${IMAGE_FILES_PATH}/${file}?expires=${expires}&signature=${await this.sign(file, expires)}`, expiresAt: expires * 1000 };
  }

  /** The image id a link names, if the link is intact and unexpired. */
  async check(file: string, expires: string | null, signature: string | null): Promise<LinkCheck> {
    const m = /^(img_[A-Za-z0-9]{1,64})\.(png|jpg|webp)$/.exec(file);
    if (!m || expires === null || signature === null || !/^\d{1,12}$/.test(expires)) return { ok: false, reason: "malformed" };
    const expected = Buffer.from(await this.sign(file, Number(expires)));
    const given = Buffer.from(signature);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, reason: "bad_signature" };
    if (Number(expires) * 1000 <= this.clock()) return { ok: false, reason: "expired" };
    return { ok: true, id: m[1]! };
  }

  private async sign(file: string, expires: number): Promise<string> {
    return createHmac("sha256", await this.secret()).update(`${file}\n${expires}`).digest("base64url");
  }
}
