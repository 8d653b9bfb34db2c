/**
 * API limits: the bounds a client can rely on, stated once. (Operational limits an operator
 * tunes, such as body sizes and concurrency, live in config.)
 */

/** Deepest nesting of arrays and objects accepted in a JSON body; this API needs about 5. */
export const MAX_JSON_DEPTH = 64;
