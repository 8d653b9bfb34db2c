/** The key settings rules (each refusal names its problem) and the usage range rules, with a fixed clock. */
import { describe, expect, test } from "bun:test";
import { isKeyExpired, isModelAllowed, parseAllowedModels, serializeAllowedModels, validateKeySettings } from "../../src/core/keyLimits";
import { MAX_USAGE_RANGE_DAYS } from "../../src/core/limits";
import { fillDays, parseUsageGroup, usageRange, UsageQueryError, EMPTY_COUNTS } from "../../src/core/usage";
import { utcDayStart } from "../../src/core/utcDays";

const NOW = Date.UTC(2026, 10, 23, 15, 30); // 2026-11-23 15:30 UTC
const MODELS = ["builtin-image", "builtin-chat"];
const input = (o: Partial<{ name: string; expiresOn: string; creditCap: string; allowedModels: string[] }> = {}) => ({ name: "k", expiresOn: "", creditCap: "", allowedModels: [], ...o });

describe("validateKeySettings", () => {
  test("empty limits mean none; an expiry day ends at that day's end (UTC)", () => {
    expect(validateKeySettings(input({ name: "  laptop  " }), MODELS, NOW)).toEqual({ ok: true, settings: { name: "laptop", expiresAt: null, creditCap: null, allowedModels: null } });
    const today = validateKeySettings(input({ expiresOn: "2026-11-23" }), MODELS, NOW);
    expect(today.ok && today.settings.expiresAt).toBe(Date.UTC(2026, 10, 24));
    const capped = validateKeySettings(input({ creditCap: "0", allowedModels: ["builtin-chat", "builtin-chat"] }), MODELS, NOW);
    expect(capped.ok && [capped.settings.creditCap, capped.settings.allowedModels]).toEqual([0, ["builtin-chat"]]);
  });

  test("refusals say what is wrong", () => {
    const refused = (o: Parameters<typeof input>[0]) => {
      const r = validateKeySettings(input(o), MODELS, NOW);
      return r.ok ? null : r.problem;
    };
    expect(refused({ name: "   " })).toEqual({ kind: "name", max: 100 });
    expect(refused({ name: "x".repeat(101) })).toEqual({ kind: "name", max: 100 });
    for (const expiresOn of ["2026-11-22", "2026-02-30", "tomorrow", "2046-01-01"]) expect(refused({ expiresOn })).toEqual({ kind: "expiry", maxDays: 3650 });
    for (const creditCap of ["-1", "1.5", "1e3", "abc", "1000000001"]) expect(refused({ creditCap })).toEqual({ kind: "cap", max: 1_000_000_000 });
    expect(refused({ allowedModels: ["no-such-model"] })).toEqual({ kind: "unknown_model", model: "no-such-model" });
  });
});

describe("limits", () => {
  test("expiry, allow-list and the stored form", () => {
    expect(isKeyExpired({ expiresAt: NOW }, NOW)).toBe(true);
    expect(isKeyExpired({ expiresAt: NOW + 1 }, NOW)).toBe(false);
    expect(isKeyExpired({ expiresAt: null }, NOW)).toBe(false);
    expect(isModelAllowed({ allowedModels: null }, "anything")).toBe(true);
    expect(isModelAllowed({ allowedModels: ["a"] }, "b")).toBe(false);
    expect(parseAllowedModels(serializeAllowedModels(["a", "b/c d"]))).toEqual(["a", "b/c d"]);
    expect(parseAllowedModels(serializeAllowedModels(null))).toBeNull();
  });
});

describe("usage ranges", () => {
  test("defaults: the 30 days ending today; explicit ranges are inclusive", () => {
    const r = usageRange({}, NOW, 30);
    expect([r.from, r.to]).toEqual(["2026-10-25", "2026-11-23"]);
    expect([r.fromMs, r.toMs]).toEqual([utcDayStart("2026-10-25")!, utcDayStart("2026-11-24")!]);
    expect(fillDays(r, []).length).toBe(30);
    const one = usageRange({ from: "2024-02-29", to: "2024-02-29" }, NOW, 30);
    expect(fillDays(one, [{ group: "2024-02-29", label: "2024-02-29", ...EMPTY_COUNTS, requests: 2 }]).map((d) => d.requests)).toEqual([2]);
  });

  test("at most MAX_USAGE_RANGE_DAYS days; bad dates and groups name their parameter", () => {
    const first = new Date(Date.UTC(2025, 0, 1));
    const last = new Date(first.getTime() + (MAX_USAGE_RANGE_DAYS - 1) * 86_400_000).toISOString().slice(0, 10);
    expect(usageRange({ from: "2025-01-01", to: last }, NOW, 30).to).toBe(last);
    const param = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return e instanceof UsageQueryError ? e.param : "other";
      }
      return null;
    };
    const dayAfter = new Date(first.getTime() + MAX_USAGE_RANGE_DAYS * 86_400_000).toISOString().slice(0, 10);
    expect(param(() => usageRange({ from: "2025-01-01", to: dayAfter }, NOW, 30))).toBe("from");
    expect(param(() => usageRange({ to: "2025-13-01" }, NOW, 30))).toBe("to");
    expect(param(() => usageRange({ from: "2025-01-02", to: "2025-01-01" }, NOW, 30))).toBe("from");
    expect(param(() => parseUsageGroup("week"))).toBe("group_by");
    expect(parseUsageGroup(undefined)).toBe("day");
  });
});
