import { describe, expect, test } from "bun:test";
import { createLogger, jsonLine, prettyLine } from "../src/logger";

const capture = (format?: "json" | "pretty") => {
  const lines: string[] = [];
  return { lines, logger: createLogger((l) => lines.push(l), format) };
};

const requestFields = {
  request_id: "req_1",
  method: "POST",
  path: "/v1/images/generations",
  status: 200,
  duration_ms: 812.4,
  user_id: 3,
  key_prefix: "sk-atl-AbCdEfGh",
  model: "acme/sd xl+1.0",
  credits_charged: 1,
  credits_refunded: 0,
  upstream: "acme/main",
  outcome: "succeeded",
};

describe("log formats", () => {
  test("json (the default): one JSON object per line with ts, level, msg and the fields", () => {
    const { lines, logger } = capture();
    logger.info("request", requestFields);
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toEqual({ ts: expect.any(String), level: "info", msg: "request", ...requestFields });
  });

  test("pretty: one readable line, the request's method, path, status and duration first, then key=value", () => {
    const { lines, logger } = capture("pretty");
    logger.info("request", { ...requestFields, absent: null });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z INFO  request POST \/v1\/images\/generations 200 812\.4ms /);
    expect(lines[0]).toContain(' request_id=req_1 user_id=3 key_prefix=sk-atl-AbCdEfGh model="acme/sd xl+1.0" credits_charged=1 credits_refunded=0 upstream=acme/main outcome=succeeded');
    expect(lines[0]).not.toContain("absent");
    expect(lines[0]).not.toContain("\n");
  });

  test("pretty: other events, values quoted when they would break the line, a stack indented below", () => {
    expect(prettyLine("T", "warn", "listening", { url: "http://127.0.0.1:8080", models: ["a", "b c"] })).toBe('T WARN  listening url=http://127.0.0.1:8080 models=["a","b c"]');
    expect(prettyLine("T", "error", "unhandled error", { error: "Error: boom\nsecond line", stack: "Error: boom\n  at f" })).toBe(
      'T ERROR unhandled error error="Error: boom\\nsecond line"\n    Error: boom\n      at f',
    );
  });
});

describe("batched standard output", () => {
  test("lines wait for one write; flush writes them in order; a full buffer is written at once", async () => {
    const { openSync, closeSync, readFileSync, mkdtempSync, rmSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const { batchedStdout } = await import("../src/logger");
    const dir = mkdtempSync(join(tmpdir(), "atelier-log-"));
    const file = join(dir, "out.log");
    const fd = openSync(file, "w");
    try {
      const out = batchedStdout(60_000, 100, fd);
      out.write('{"n":1}');
      out.write('{"n":2}');
      expect(readFileSync(file, "utf8")).toBe("");
      out.flush();
      expect(readFileSync(file, "utf8")).toBe('{"n":1}\n{"n":2}\n');
      out.write("x".repeat(120));
      expect(readFileSync(file, "utf8")).toBe(`{"n":1}\n{"n":2}\n${"x".repeat(120)}\n`);
    } finally {
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("json lines", () => {
  test("are the same text as stringifying the spread object, for any fields", () => {
    const ts = "2026-01-02T03:04:05.678Z";
    const cases: Record<string, unknown>[] = [
      {},
      { request_id: "req_1", status: 200, duration_ms: 1.5, user_id: null, key_prefix: "sk-atl-ab", skipped: undefined },
      { msg: "overridden", nested: { a: [1, "two", { three: true }] } },
      { level: "error", ts: "then", "quote\"key": "line\nbreak \u2028 end" },
      { only: undefined },
    ];
    for (const fields of cases) {
      for (const msg of ["request", 'a "quoted"\nmessage']) {
        const line = jsonLine(ts, "info", msg, fields);
        expect(line).toBe(JSON.stringify({ ts, level: "info", msg, ...fields }));
        expect(JSON.parse(line)).toEqual(JSON.parse(JSON.stringify({ ts, level: "info", msg, ...fields })));
      }
    }
  });
});
