/** The workbench's languages: see locale.ts (which one) and translator.ts (`t`). */
export { DEFAULT_LOCALE, LOCALE_COOKIE, LOCALE_NAMES, LOCALES, isLocale, negotiateLocale, parseAcceptLanguage, type Locale } from "./locale";
export { translator, type PluralBase, type Translator } from "./translator";
export type { MessageKey } from "./catalog";
