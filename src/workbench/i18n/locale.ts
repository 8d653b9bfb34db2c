/**
 * Which language a workbench page is in: the visitor's choice (the `atelier_lang` cookie the
 * switch in the header sets, which works signed out too) wins; otherwise the browser's
 * Accept-Language, by q-value; otherwise English. The /v1 API always answers in English
 * (OpenAI clients parse its errors), so none of this applies there.
 */
export const LOCALES = ["en", "zh-CN"] as const;
export type Locale = (typeof LOCALES)[number];
export const DEFAULT_LOCALE: Locale = "en";

/** The cookie the language switch sets; its value is one of LOCALES. */
export const LOCALE_COOKIE = "atelier_lang";

/** How each language names itself on the switch. */
export const LOCALE_NAMES: Record<Locale, string> = { en: "English", "zh-CN": "中文" };

export function isLocale(value: unknown): value is Locale {
  return typeof value === "string" && (LOCALES as readonly string[]).includes(value);
}

/**
 * One language tag to a supported locale, or null. Simplified Chinese is `zh`, `zh-CN`, `zh-SG`
 * and any `zh-Hans…`; Traditional (`zh-TW`, `zh-HK`, `zh-Hant…`) is not what the zh catalog is
 * written in, so it falls through to the next preference (and in the end to English).
 */
export function localeOfTag(tag: string): Locale | null {
  const parts = tag.trim().toLowerCase().split(/[-_]/);
  if (parts[0] === "en") return "en";
  if (parts[0] !== "zh") return null;
  const rest = parts.slice(1);
  if (rest.length === 0 || rest[0] === "hans" || rest[0] === "cn" || rest[0] === "sg") return "zh-CN";
  return null;
}

/** The Accept-Language header's tags, most preferred first (q=0 means "not this"); at most 32 read. */
export function parseAcceptLanguage(header: string | null | undefined): string[] {
  if (!header) return [];
  const entries: { tag: string; q: number; order: number }[] = [];
  for (const [order, item] of header.split(",").slice(0, 32).entries()) {
    const [rawTag, ...params] = item.split(";");
    const tag = (rawTag ?? "").trim();
    if (!/^(\*|[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*)$/.test(tag)) continue;
    let q = 1;
    for (const p of params) {
      const m = /^\s*q\s*=\s*([01](?:\.\d{0,3})?)\s*$/i.exec(p);
      if (m) q = Math.min(1, Number(m[1]));
    }
    if (q > 0) entries.push({ tag, q, order });
  }
  // Equal q-values keep the header's order.
  entries.sort((a, b) => b.q - a.q || a.order - b.order);
  return entries.map((e) => e.tag);
}

/** The page's locale from the switch's cookie value and the Accept-Language header. */
export function negotiateLocale(cookie: string | null | undefined, acceptLanguage: string | null | undefined): Locale {
  if (isLocale(cookie)) return cookie;
  for (const tag of parseAcceptLanguage(acceptLanguage)) {
    if (tag === "*") return DEFAULT_LOCALE;
    const locale = localeOfTag(tag);
    if (locale) return locale;
  }
  return DEFAULT_LOCALE;
}
