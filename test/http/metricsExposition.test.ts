/**
 * The exposition text a scrape answers: a NaN sample (the event loop delay's mean, when no sample
 * landed since the last scrape) must be spelled `NaN`, as the format says, or a strict parser
 * refuses the whole scrape. Tested on a registry whose value is NaN by construction, not by timing.
 */
import { describe, expect, test } from "bun:test";
import { Gauge, Registry } from "prom-client";
import { exposition } from "../../src/http/metrics";
import { parsePromText } from "../support/promText";

describe("exposition", () => {
  test("a NaN sample is written NaN (prom-client writes Nan) and the text parses strictly", async () => {
    const registry = new Registry();
    const mean = new Gauge({ name: "x_mean_seconds", help: "A mean with no sample yet.", registers: [registry] });
    mean.set(NaN);
    const labelled = new Gauge({ name: "x_labelled", help: "Labelled; one value is NaN.", labelNames: ["k"], registers: [registry] });
    labelled.set({ k: "a" }, NaN);
    labelled.set({ k: "Nan" }, 2);
    // The premise: prom-client's own text is not the format's.
    expect(await registry.metrics()).toContain("x_mean_seconds Nan\n");

    const text = await exposition(registry);
    expect(text).toContain("x_mean_seconds NaN\n");
    const parsed = parsePromText(text);
    const byKey = new Map(parsed.samples.map((s) => [`${s.name}${JSON.stringify(s.labels)}`, s.value]));
    expect(Number.isNaN(byKey.get("x_mean_seconds{}"))).toBe(true);
    expect(Number.isNaN(byKey.get('x_labelled{"k":"a"}'))).toBe(true);
    // Only values change: a label value spelled Nan is left as it is.
    expect(byKey.get('x_labelled{"k":"Nan"}')).toBe(2);
  });
});
