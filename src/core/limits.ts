/**
 * API limits: the bounds a client can rely on, stated once. (Operational limits an operator
 * tunes, such as body sizes and concurrency, live in config.)
 */

/** Deepest nesting of arrays and objects accepted in a JSON body; this API needs about 5. */
export const MAX_JSON_DEPTH = 64;

/** Characters (code points) in an image prompt. */
export const MAX_PROMPT_CHARS = 32_000;

/** Reference images of one generation request. */
export const MAX_REFERENCE_IMAGES = 10;

/** Images of one edit request (the first is edited, the others guide it). */
export const MAX_EDIT_IMAGES = 16;

/** One input image, in decoded bytes (10 MiB). */
export const MAX_IMAGE_BYTES = 10 * 1024 * 1024;

/** Each side of `size` on models that accept any WxH (the built-in renderer). */
export const FREE_SIZE_MIN = 64;
export const FREE_SIZE_MAX = 2048;
