/**
 * `t`: a page's messages in its locale. Every page gets one (signed in: `viewer.t`), so a page
 * never holds an English sentence of its own:
 *
 *   t("keys.title")                              plain text; the html template escapes it
 *   t("keys.revokeConfirm", { name: k.name })    `{name}` filled in (the result is still escaped)
 *   t.html("auth.signIn.noAccount")              catalog text with our own markup (a link, <code>);
 *                                                its parameters are escaped like any interpolation
 *   t.plural("common.credits", n)                `.one` / `.other` by the locale's plural rules
 *
 * The parameter names of a message come from its English text, so a missing parameter or a
 * mistyped key is a compile error.
 */
import { html, Html, type Interpolation } from "../html";
import { EN, ZH, type MessageKey } from "./catalog";
import { type Locale } from "./locale";

type En = typeof EN;
type ParamNames<S> = S extends `${string}{${infer P}}${infer Rest}` ? P | ParamNames<Rest> : never;
type ParamsOf<K extends MessageKey> = ParamNames<En[K]>;
type ArgsFor<Names extends string, V> = [Names] extends [never] ? [] : [params: Record<Names, V>];

/** A key `base` whose catalog has both `base.one` and `base.other`. */
type PluralBaseOf<K> = K extends `${infer B}.other` ? (`${B}.one` extends MessageKey ? B : never) : never;
export type PluralBase = PluralBaseOf<MessageKey>;

export interface Translator {
  <K extends MessageKey>(key: K, ...params: ArgsFor<ParamsOf<K>, string | number>): string;
  readonly locale: Locale;
  html<K extends MessageKey>(key: K, ...params: ArgsFor<ParamsOf<K>, Interpolation>): Html;
  plural<B extends PluralBase>(
    base: B,
    count: number,
    ...params: ArgsFor<Exclude<ParamsOf<`${B}.other` & MessageKey>, "count">, string | number>
  ): string;
  /** The `client.<script>.*` messages of the given scripts (and common.js), keyed without `client.`. */
  clientMessages(scripts: readonly string[]): Record<string, string>;
}

const CATALOGS: Record<Locale, Record<MessageKey, string>> = { en: EN, "zh-CN": ZH };

/** `{name}` placeholders, filled from params; an unknown one is left as written (a test finds it). */
function fill(text: string, params: Record<string, unknown> | undefined, each: (v: unknown) => string): string {
  if (!params) return text;
  return text.replace(/\{(\w+)\}/g, (whole, name: string) => (name in params ? each(params[name]) : whole));
}

function makeTranslator(locale: Locale): Translator {
  const messages = CATALOGS[locale];
  const rules = new Intl.PluralRules(locale);
  const t = ((key: MessageKey, params?: Record<string, string | number>) => fill(messages[key], params, String)) as Translator;
  Object.defineProperty(t, "locale", { value: locale });
  t.html = (key: MessageKey, params?: Record<string, Interpolation>) =>
    // The catalog text is our own markup; each parameter is escaped unless it is Html already.
    new Html(fill(messages[key], params, (v) => html`${v as Interpolation}`.value));
  t.plural = (base: string, count: number, params?: Record<string, string | number>) => {
    const form = rules.select(count) === "one" ? "one" : "other";
    return fill(messages[`${base}.${form}` as MessageKey], { ...params, count }, String);
  };
  t.clientMessages = (scripts) => {
    const prefixes = ["common", ...scripts.map((s) => s.replace(/\.js$/, ""))].map((s) => `client.${s}.`);
    const out: Record<string, string> = {};
    for (const [key, text] of Object.entries(messages)) {
      if (prefixes.some((p) => key.startsWith(p))) out[key.slice("client.".length)] = text;
    }
    return out;
  };
  return t;
}

const TRANSLATORS: Record<Locale, Translator> = { en: makeTranslator("en"), "zh-CN": makeTranslator("zh-CN") };

export function translator(locale: Locale): Translator {
  return TRANSLATORS[locale];
}
