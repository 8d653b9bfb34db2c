/**
 * The per-request series (atelier_http_requests_total and atelier_http_request_duration_seconds),
 * counted in plain numbers on the request path and handed to prom-client only when scraped.
 * prom-client's own counter and histogram hash a label object and validate it on every
 * observation, several microseconds per request; here a request costs one Map lookup keyed by
 * route and method, a bucket search and a few additions. Series are never removed, as in
 * prom-client: their number is bounded by the route patterns, methods and statuses.
 */
import type { Metric, Registry } from "prom-client";

interface Series {
  labels: { route: string; method: string };
  /** Answers by status code. */
  statuses: Map<number, number>;
  /** Observations per bucket (not cumulative), the last one for values above every bound. */
  buckets: number[];
  sum: number;
  count: number;
}

/** One sample in the shape prom-client's Registry formats (a custom metric's `get()` result). */
interface Sample {
  labels: Record<string, string | number>;
  /** Labels printed after `labels` (prom-client's histograms put `le` first); formatted once per object. */
  sharedLabels?: Record<string, string>;
  value: number;
  metricName?: string;
}

export class RequestMetrics {
  private readonly series = new Map<string, Series>();

  constructor(
    registry: Registry,
    private readonly bounds: readonly number[],
    names = { requests: "atelier_http_requests_total", duration: "atelier_http_request_duration_seconds" },
  ) {
    const all = () => this.series.values();
    // Shaped like prom-client's own metrics (name, help, type, aggregator, get), which is all its
    // Registry reads; its types name only its classes, hence the casts.
    registry.registerMetric({
      name: names.requests,
      help: "HTTP requests answered, by route pattern, method and status.",
      type: "counter",
      aggregator: "sum",
      get: async () => {
        const values: Sample[] = [];
        for (const s of all()) for (const [status, n] of s.statuses) values.push({ labels: { ...s.labels, status: String(status) }, value: n });
        return { name: names.requests, help: "HTTP requests answered, by route pattern, method and status.", type: "counter", aggregator: "sum", values };
      },
    } as unknown as Metric);
    registry.registerMetric({
      name: names.duration,
      help: "Time to answer an HTTP request, by route pattern.",
      type: "histogram",
      aggregator: "sum",
      get: async () => {
        const values: Sample[] = [];
        for (const s of all()) {
          let cumulative = 0;
          bounds.forEach((le, i) => {
            cumulative += s.buckets[i]!;
            values.push({ labels: { le }, sharedLabels: s.labels, value: cumulative, metricName: `${names.duration}_bucket` });
          });
          values.push({ labels: { le: "+Inf" }, sharedLabels: s.labels, value: s.count, metricName: `${names.duration}_bucket` });
          values.push({ labels: {}, sharedLabels: s.labels, value: s.sum, metricName: `${names.duration}_sum` });
          values.push({ labels: {}, sharedLabels: s.labels, value: s.count, metricName: `${names.duration}_count` });
        }
        return { name: names.duration, help: "Time to answer an HTTP request, by route pattern.", type: "histogram", aggregator: "sum", values };
      },
    } as unknown as Metric);
  }

  observe(route: string, method: string, status: number, seconds: number): void {
    const key = `${method} ${route}`;
    let s = this.series.get(key);
    if (!s) {
      s = { labels: { route, method }, statuses: new Map(), buckets: new Array<number>(this.bounds.length + 1).fill(0), sum: 0, count: 0 };
      this.series.set(key, s);
    }
    s.statuses.set(status, (s.statuses.get(status) ?? 0) + 1);
    let i = 0;
    while (i < this.bounds.length && seconds > this.bounds[i]!) i++;
    s.buckets[i]!++;
    s.sum += seconds;
    s.count++;
  }
}
