/**
 * One area's messages in both languages. The English object is the source of the keys (and of
 * each message's `{param}` names); the Chinese one must have exactly the same keys, so a missing
 * or stray translation is a compile error in the area's own file.
 */
export interface Messages<E extends Record<string, string>> {
  en: E;
  zh: Record<keyof E, string>;
}

export function defineMessages<const E extends Record<string, string>>(en: E, zh: { [K in keyof E]: string }): Messages<E> {
  return { en, zh };
}
