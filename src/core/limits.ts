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

/** Partial images of one streamed request (`partial_images`, OpenAI's own limit). */
export const MAX_PARTIAL_IMAGES = 3;

/** One input image, in decoded bytes (10 MiB). */
export const MAX_IMAGE_BYTES = 10 * 1024 * 1024;

/** An image reference given by URL: its length in characters, and the redirects followed. */
export const MAX_IMAGE_URL_CHARS = 8192;
export const MAX_IMAGE_URL_REDIRECTS = 3;

/** Each side of `size` on models that accept any WxH (the built-in renderer). */
export const FREE_SIZE_MIN = 64;
export const FREE_SIZE_MAX = 2048;

/** An API key's name, after trimming: 1 to this many characters (the workbench and `atelier key create`). */
export const MAX_KEY_NAME_CHARS = 100;

/**
 * The most credits one grant or deduction moves, from the admin page or the CLI. Balances are
 * JavaScript numbers, exact only up to 2^53: a cap this far below keeps every balance and ledger
 * sum exact (a grant of 2^53 - 1 made the next grants of 1 vanish) and is still far above any
 * real top-up. One cap for both, so the page and the CLI accept the same amounts.
 */
export const MAX_CREDIT_GRANT = 1_000_000_000;

/** An email address (RFC 5321's path limit); longer ones are not looked up at all. */
export const MAX_EMAIL_CHARS = 254;

/**
 * The most credits one image request may cost ([[models]] price, [server] builtin_image_price).
 * Far below MAX_CREDIT_GRANT, so a balance that could pay it stays exact.
 */
export const MAX_MODEL_PRICE = 1_000_000;

/** An API key's expiry, in days from when it is set (about ten years). */
export const MAX_KEY_LIFETIME_DAYS = 3650;

/** An API key's credit cap (the same bound as one grant, so spends stay exact). */
export const MAX_KEY_CREDIT_CAP = MAX_CREDIT_GRANT;

/** Models on one key's allow-list. */
export const MAX_KEY_ALLOWED_MODELS = 200;

/** The span one `GET /v1/usage` (or the usage page) covers, in days (inclusive of both ends). */
export const MAX_USAGE_RANGE_DAYS = 366;

/** The usage dashboard's default window, in days (today included). */
export const USAGE_DASHBOARD_DAYS = 30;

/** Redemption codes: codes in one batch, a batch name's characters, and the longest expiry. */
export const MAX_CODE_BATCH_SIZE = 10_000;
export const MAX_CODE_BATCH_NAME_CHARS = 100;
export const MAX_CODE_EXPIRY_DAYS = 3_650;

/**
 * An API body declared at most this long is read without a counting stream (http/body
 * guardBody's fast path): chat and most image requests are far smaller, and a body this size
 * held by a slow client is a small, time-bounded share of the in-flight budget.
 */
export const SMALL_API_BODY_BYTES = 64 * 1024;

/**
 * A failure's detail (the engine's own, already redacted words) kept in the request history for
 * admins: room for the upstream's message (engines/redact MAX_UPSTREAM_MESSAGE_CHARS) and the
 * upstream, account and attempt around it, never an unbounded row.
 */
export const MAX_ERROR_DETAIL_CHARS = 1_000;
