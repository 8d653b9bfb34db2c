/**
 * A workbench request's language: the switch's cookie, else Accept-Language (rules in
 * workbench/i18n/locale.ts). Only the workbench reads it; /v1 answers stay English.
 */
import type { Config } from "../../config";
import { LOCALE_COOKIE, negotiateLocale, translator, type Locale, type Translator } from "../../workbench/i18n";
import { cookieIsSecure, readCookie } from "./sessionCookies";

export function localeOf(request: Request): Locale {
  return negotiateLocale(readCookie(request, LOCALE_COOKIE), request.headers.get("accept-language"));
}

export function translatorFor(request: Request): Translator {
  return translator(localeOf(request));
}

/** A year: the choice is a preference, not a session. Readable by the server only. */
const LOCALE_COOKIE_MAX_AGE_S = 365 * 24 * 3600;

export function localeCookie(locale: Locale, config: Config, request: Request): string {
  const secure = cookieIsSecure(config, request) ? "; Secure" : "";
  return `${LOCALE_COOKIE}=${locale}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${LOCALE_COOKIE_MAX_AGE_S}${secure}`;
}
