/**
 * What an API key may do beyond "it exists and is not revoked": an expiry time, a credit cap
 * (the key stops once it has spent that many credits) and a model allow-list. Each is optional;
 * none set means the key acts for its user without limits. The checks live where the fact is
 * decided: expiry at authentication, the allow-list once the model is known, the cap inside the
 * charge's transaction (store/credits), so two concurrent requests cannot both pass it.
 */
import { DAY_MS, utcDay, utcDayStart } from "./utcDays";
import { MAX_KEY_ALLOWED_MODELS, MAX_KEY_CREDIT_CAP, MAX_KEY_LIFETIME_DAYS, MAX_KEY_NAME_CHARS } from "./limits";

/** The last day a key works (the form's value for an expiry), or "" for none. */
export function expiryDay(expiresAt: number | null): string {
  return expiresAt === null ? "" : utcDay(expiresAt - 1);
}

export interface KeyLimits {
  /** Milliseconds since the epoch; null: never expires. */
  expiresAt: number | null;
  /** Credits the key may spend in all (charged minus refunded); null: no cap beyond the balance. */
  creditCap: number | null;
  /** Model ids the key may use; null: every model. */
  allowedModels: string[] | null;
}

export const NO_KEY_LIMITS: KeyLimits = { expiresAt: null, creditCap: null, allowedModels: null };

/** The stored JSON array of an allow-list (null: every model). */
export function parseAllowedModels(stored: string | null): string[] | null {
  if (stored === null) return null;
  const value: unknown = JSON.parse(stored);
  return Array.isArray(value) ? value.filter((m): m is string => typeof m === "string") : null;
}

export function serializeAllowedModels(models: string[] | null): string | null {
  return models === null ? null : JSON.stringify(models);
}

export function isKeyExpired(limits: Pick<KeyLimits, "expiresAt">, now: number): boolean {
  return limits.expiresAt !== null && now >= limits.expiresAt;
}

export function isModelAllowed(limits: Pick<KeyLimits, "allowedModels">, modelId: string): boolean {
  return limits.allowedModels === null || limits.allowedModels.includes(modelId);
}

/** A key's settings as a form gives them, before validation (empty strings mean "none"). */
export interface KeySettingsInput {
  name: string;
  /** The last day (UTC, YYYY-MM-DD) the key works: it expires at the end of it; "" for never. */
  expiresOn: string;
  /** "" for no cap. */
  creditCap: string;
  /** Empty: every model. */
  allowedModels: string[];
}

export type KeySettings = { name: string } & KeyLimits;

/** Why a key's settings were refused (the page words it in the viewer's language). */
export type KeySettingsProblem =
  | { kind: "name"; max: number }
  | { kind: "expiry"; maxDays: number }
  | { kind: "cap"; max: number }
  | { kind: "too_many_models"; max: number }
  | { kind: "unknown_model"; model: string };

/**
 * Validates a key's name and limits. `knownModels` are the catalog's ids: an allow-list naming
 * anything else is refused (a typo would silently lock the key out).
 */
export function validateKeySettings(input: KeySettingsInput, knownModels: readonly string[], now: number): { ok: true; settings: KeySettings } | { ok: false; problem: KeySettingsProblem } {
  const name = input.name.trim();
  if (name.length === 0 || name.length > MAX_KEY_NAME_CHARS) return { ok: false, problem: { kind: "name", max: MAX_KEY_NAME_CHARS } };
  let expiresAt: number | null = null;
  const day = input.expiresOn.trim();
  if (day !== "") {
    const start = utcDayStart(day);
    if (start === null || start + DAY_MS <= now || start > now + MAX_KEY_LIFETIME_DAYS * DAY_MS) return { ok: false, problem: { kind: "expiry", maxDays: MAX_KEY_LIFETIME_DAYS } };
    expiresAt = start + DAY_MS;
  }
  let creditCap: number | null = null;
  const cap = input.creditCap.trim();
  if (cap !== "") {
    const n = Number(cap);
    if (!/^\d+$/.test(cap) || n > MAX_KEY_CREDIT_CAP) return { ok: false, problem: { kind: "cap", max: MAX_KEY_CREDIT_CAP } };
    creditCap = n;
  }
  const chosen = [...new Set(input.allowedModels)];
  if (chosen.length > MAX_KEY_ALLOWED_MODELS) return { ok: false, problem: { kind: "too_many_models", max: MAX_KEY_ALLOWED_MODELS } };
  const unknown = chosen.find((m) => !knownModels.includes(m));
  if (unknown !== undefined) return { ok: false, problem: { kind: "unknown_model", model: unknown.slice(0, 200) } };
  return { ok: true, settings: { name, expiresAt, creditCap, allowedModels: chosen.length === 0 ? null : chosen } };
}
