/**
 * RequestMetrics counts requests in plain numbers and formats them only when scraped: its
 * exposition must be exactly what prom-client's own Counter and Histogram print for the same
 * observations, so dashboards and alerts built on those series see no difference.
 */
import { describe, expect, test } from "bun:test";
import { Counter, Histogram, Registry } from "prom-client";
import { RequestMetrics } from "../../src/http/requestMetrics";

const BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const OBSERVATIONS: [route: string, method: string, status: number, seconds: number][] = [
  ["/v1/chat/completions", "POST", 200, 0.0004],
  ["/v1/chat/completions", "POST", 200, 0.005], // exactly on a bound: counted in that bucket
  ["/v1/chat/completions", "POST", 429, 0.02],
  ["/v1/images/tasks/:id", "GET", 404, 0.3],
  ["unmatched", "GET", 404, 0.0011],
  ["/v1/images/generations", "POST", 200, 301], // above every bound: only in +Inf
  ["/v1/chat/completions", "GET", 405, 1.5],
];

describe("RequestMetrics", () => {
  test("prints the same series as prom-client's Counter and Histogram fed the same requests", async () => {
    const ours = new Registry();
    const metrics = new RequestMetrics(ours, BOUNDS);
    const theirs = new Registry();
    const counter = new Counter({ name: "atelier_http_requests_total", help: "HTTP requests answered, by route pattern, method and status.", labelNames: ["route", "method", "status"], registers: [theirs] });
    const histogram = new Histogram({ name: "atelier_http_request_duration_seconds", help: "Time to answer an HTTP request, by route pattern.", labelNames: ["route", "method"], buckets: BOUNDS, registers: [theirs] });
    for (const [route, method, status, seconds] of OBSERVATIONS) {
      metrics.observe(route, method, status, seconds);
      counter.inc({ route, method, status: String(status) });
      histogram.observe({ route, method }, seconds);
    }
    const sorted = (text: string) => text.split("\n").filter(Boolean).sort();
    const expected = sorted(await theirs.metrics());
    expect(sorted(await ours.metrics())).toEqual(expected);
    // The comparison covers real samples, not two empty documents.
    expect(expected).toContain('atelier_http_requests_total{route="/v1/chat/completions",method="POST",status="200"} 2');
    expect(expected).toContain('atelier_http_request_duration_seconds_bucket{le="300",route="/v1/images/generations",method="POST"} 0');
    expect(expected).toContain('atelier_http_request_duration_seconds_bucket{le="+Inf",route="/v1/images/generations",method="POST"} 1');
  });
});
