/** The workbench's stylesheet and client scripts, embedded into the binary as text. */
import css from "./assets/workbench.css" with { type: "text" };
import common from "./assets/common.js" with { type: "text" };
import playground from "./assets/playground.js" with { type: "text" };
import gallery from "./assets/gallery.js" with { type: "text" };

export interface Asset {
  body: string;
  type: string;
  etag: string;
}

function asset(body: string, type: string): Asset {
  return { body, type, etag: `"${new Bun.CryptoHasher("sha1").update(body).digest("hex").slice(0, 16)}"` };
}

export const ASSETS: Record<string, Asset> = {
  "workbench.css": asset(css, "text/css; charset=utf-8"),
  "common.js": asset(common, "text/javascript; charset=utf-8"),
  "playground.js": asset(playground, "text/javascript; charset=utf-8"),
  "gallery.js": asset(gallery, "text/javascript; charset=utf-8"),
};
