/**
 * What ships beside the code stays true to it: the README's configuration reference lists every
 * key of src/config.ts with its default, the CI script runs the README's test command, and the
 * Dockerfile builds the way `bun run build` does with the Bun version everything else names.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { TObject, TSchema } from "@sinclair/typebox";
import { ConfigSchema } from "../src/config";

const root = join(import.meta.dir, "..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const readme = read("README.md");
const dockerfile = read("Dockerfile");
const ci = read(".ci/run");
const pkg = JSON.parse(read("package.json")) as { scripts: Record<string, string> };

/** The rows `| \`key\` | default | meaning |` of the table under `### <heading>` in ## Configuration. */
function configTable(heading: string): Map<string, string> {
  const section = readme.slice(readme.indexOf("\n## Configuration"));
  const start = section.indexOf(`\n### ${heading}`);
  if (start < 0) throw new Error(`README ## Configuration has no "### ${heading}" table`);
  const body = section.slice(start + 1).split("\n").slice(1);
  const end = body.findIndex((l) => l.startsWith("#"));
  const rows = new Map<string, string>();
  for (const line of body.slice(0, end < 0 ? undefined : end)) {
    const m = /^\| `([a-z_]+)` \| ([^|]+) \|/.exec(line);
    if (m) rows.set(m[1]!, m[2]!.trim());
  }
  return rows;
}

const objectOf = (schema: TSchema): TObject => (schema.type === "array" ? (schema.items as TObject) : (schema as TObject));

const SECTIONS: [string, TObject][] = [
  ["`[server]`", objectOf(ConfigSchema.properties.server)],
  ["`[limits]`", objectOf(ConfigSchema.properties.limits)],
  ["`[[upstreams]]`", objectOf(ConfigSchema.properties.upstreams)],
  ["`[[upstreams.accounts]]`", objectOf(objectOf(ConfigSchema.properties.upstreams).properties.accounts!)],
  ["`[[models]]`", objectOf(ConfigSchema.properties.models)],
  ["`[workbench]`", objectOf(ConfigSchema.properties.workbench)],
  ["`[chat]`", objectOf(ConfigSchema.properties.chat)],
  ["`[database]`", objectOf(ConfigSchema.properties.database)],
  ["`[tasks]`", objectOf(ConfigSchema.properties.tasks)],
  ["`[storage]`", objectOf(ConfigSchema.properties.storage)],
  ["`[webhooks]`", objectOf(ConfigSchema.properties.webhooks)],
  ["`[fetch]`", objectOf(ConfigSchema.properties.fetch)],
  ["`[metrics]`", objectOf(ConfigSchema.properties.metrics)],
  ["`[redis]`", objectOf(ConfigSchema.properties.redis)],
  ["`[instance]`", objectOf(ConfigSchema.properties.instance)],
];

describe("README configuration reference", () => {
  test("covers every section of the schema", () => {
    expect(Object.keys(ConfigSchema.properties).sort()).toEqual(["chat", "database", "fetch", "instance", "limits", "metrics", "models", "redis", "server", "storage", "tasks", "upstreams", "webhooks", "workbench"]);
  });

  for (const [heading, schema] of SECTIONS) {
    test(`${heading}: every key, with its default, and nothing that is not a key`, () => {
      const rows = configTable(heading);
      const keys = Object.keys(schema.properties);
      expect({ heading, documented: [...rows.keys()].sort() }).toEqual({ heading, documented: [...keys].sort() });
      for (const key of keys) {
        const fallback = (schema.properties[key] as TSchema).default as unknown;
        if (fallback === undefined || typeof fallback === "object") continue;
        expect({ key, default: rows.get(key)?.split(" ")[0] }).toEqual({ key, default: `\`${JSON.stringify(fallback)}\`` });
      }
    });
  }
});

describe("shipping", () => {
  const quickStart = readme.slice(readme.indexOf("## Quick start"), readme.indexOf("\n## ", readme.indexOf("## Quick start") + 5));
  const commandOf = (script: string) => {
    const line = quickStart.split("\n").find((l) => l.includes(`run ${script}`));
    return line?.split("#")[0]!.trim();
  };

  test("the quick start has the two commands, and .ci/run runs the test one verbatim", () => {
    expect(commandOf("start")).toBe("npx --yes bun@1.4.5 run start");
    expect(commandOf("test:all")).toBe("npx --yes bun@1.4.5 run test:all");
    expect(ci).toStartWith("#!/usr/bin/env bash");
    expect(ci).toContain("set -euo pipefail");
    expect(ci.split("\n")).toContain(commandOf("test:all")!);
    expect(pkg.scripts["test:all"]).toContain("bun test");
    expect(pkg.scripts.start).toContain("src/main.ts serve");
  });

  test("README, CI and Dockerfile name the Bun version the tests run on", () => {
    const versions = new Set([
      ...[...readme.matchAll(/bun@(\d+\.\d+\.\d+)/g)].map((m) => m[1]),
      ...[...ci.matchAll(/bun@(\d+\.\d+\.\d+)/g)].map((m) => m[1]),
      ...[...dockerfile.matchAll(/oven\/bun:(\d+\.\d+\.\d+)/g)].map((m) => m[1]),
    ]);
    expect([...versions]).toEqual([Bun.version]);
  });

  test("the build makes one self-contained binary the way the design asks", () => {
    const build = pkg.scripts.build!;
    for (const flag of ["--compile", "--minify-whitespace", "--minify-syntax", "--no-compile-autoload-dotenv", "--outfile dist/atelier"]) expect(build).toContain(flag);
    expect(build).not.toMatch(/--minify(\s|$)/);
  });

  test("the Dockerfile compiles with `bun run build` and runs the binary non-root with /data, 8080 and a healthcheck", () => {
    expect(dockerfile).toMatch(/^FROM oven\/bun:[\d.]+ AS build$/m);
    expect(dockerfile).toContain("bun install --frozen-lockfile");
    expect(dockerfile).toContain("bun run build");
    expect(dockerfile).toContain("cp dist/atelier");
    expect(dockerfile).toMatch(/^USER (?!root|0)\S+/m);
    expect(dockerfile).toMatch(/^VOLUME \["\/data"\]/m);
    expect(dockerfile).toMatch(/ATELIER_DATA=\/data/);
    // The volume's mount point is private like a data directory atelier makes (store/privateFiles.ts).
    expect(dockerfile).toContain("mkdir -m 700 -p /out/data");
    expect(dockerfile).toMatch(/^EXPOSE 8080$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK .*"healthcheck"\]$/m);
    for (const m of dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
      for (const source of m[1]!.split(/\s+/)) expect({ source, exists: existsSync(join(root, source)) }).toEqual({ source, exists: true });
    }
  });

  test("the Dockerfile's build stage installs production dependencies only; the image has OCI labels with the package version", () => {
    const buildStage = dockerfile.slice(dockerfile.indexOf(" AS build"), dockerfile.indexOf("\nFROM ", dockerfile.indexOf(" AS build")));
    expect(buildStage).toMatch(/^RUN bun install --frozen-lockfile --production$/m);
    const runStage = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "));
    const label = (name: string) => new RegExp(`org\\.opencontainers\\.image\\.${name}="([^"]*)"`).exec(runStage)?.[1];
    expect(label("title")).toBe("Atelier");
    expect(label("version")).toBe((JSON.parse(read("package.json")) as { version: string }).version);
    expect(label("revision")).toBe("${ATELIER_COMMIT}");
    expect(label("description")).toBeTruthy();
    // The commit reaches `bun run build` (which bakes it in) as a build argument.
    expect(buildStage).toMatch(/^ARG ATELIER_COMMIT=/m);
    expect(pkg.scripts.build).toContain("ATELIER_COMMIT");
  });

  test("deploy/docker-compose.yml: the image's service with a volume, the healthcheck, and a stop grace period above shutdown_grace_ms", () => {
    const compose = Bun.YAML.parse(read("deploy/docker-compose.yml")) as {
      services: Record<string, { build?: { context: string }; volumes?: string[]; healthcheck?: { test: string[] }; stop_grace_period?: string }>;
      volumes?: Record<string, unknown>;
    };
    const service = compose.services.atelier!;
    expect(join(root, "deploy", service.build!.context)).toBe(root);
    expect(service.volumes).toContain("atelier-data:/data");
    expect(Object.keys(compose.volumes ?? {})).toContain("atelier-data");
    expect(service.healthcheck?.test).toEqual(["CMD", "/usr/local/bin/atelier", "healthcheck"]);
    const grace = /^(\d+)s$/.exec(service.stop_grace_period ?? "");
    expect(grace).not.toBeNull();
    const shutdownGraceMs = (ConfigSchema.properties.server.properties.shutdown_grace_ms as TSchema).default as number;
    expect(Number(grace![1]) * 1000).toBeGreaterThan(shutdownGraceMs);
  });
});
