/**
 * deploy/scale-out/ (README "Scaling out") stays true to the code: Docker cannot run here, so
 * the compose file is parsed with Bun's YAML parser and checked for what two instances need to
 * share one deployment, the nginx file names every instance, and the instances' configuration
 * file loads through the real config loader with the environment the compose file gives it.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { TSchema } from "@sinclair/typebox";
import { ConfigSchema, loadConfig } from "../src/config";

const root = join(import.meta.dir, "..");
const dir = join(root, "deploy", "scale-out");
const read = (name: string) => readFileSync(join(dir, name), "utf8");

interface Service {
  build?: { context: string };
  image?: string;
  volumes?: string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }> | string[];
  healthcheck?: { test: string[] };
  stop_grace_period?: string;
  ports?: string[];
}
const compose = Bun.YAML.parse(read("docker-compose.yml")) as { services: Record<string, Service>; volumes?: Record<string, unknown> };
const instances = Object.entries(compose.services).filter(([name]) => /^atelier-\d+$/.test(name));

/** The names a compose value takes from the environment: `${NAME}`, `${NAME:?message}`, `${NAME:-default}`. */
const envNames = (value: string) => [...value.matchAll(/\$\{([A-Z0-9_]+)(?::[?-][^}]*)?\}/g)].map((m) => m[1]!);

/** The .env a deployment writes from example.env, with a webhook key that is valid. */
function exampleEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of read("example.env").split("\n")) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line);
    if (m) env[m[1]!] = m[2]!;
  }
  env.ATELIER_WEBHOOK_KEY = Buffer.alloc(32, 7).toString("base64");
  return env;
}

/** What compose would set in a container: its environment with ${…} filled from .env. */
function containerEnv(service: Service, dotEnv: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(service.environment ?? {})) {
    out[k] = v.replace(/\$\{([A-Z0-9_]+)(?::[?-][^}]*)?\}/g, (_, name: string) => dotEnv[name] ?? "");
  }
  return out;
}

describe("deploy/scale-out", () => {
  test("two or more instances built from the repository, sharing one database, one Redis and one configuration", () => {
    expect(instances.length).toBeGreaterThanOrEqual(2);
    const [, first] = instances[0]!;
    for (const [, service] of instances) {
      expect(join(dir, service.build!.context)).toBe(root);
      expect(service.environment?.ATELIER_DATABASE_URL).toStartWith("postgres://");
      expect(service.environment?.ATELIER_DATABASE_URL).toBe(first.environment!.ATELIER_DATABASE_URL!);
      expect(service.environment?.ATELIER_REDIS_URL).toStartWith("redis://");
      expect(service.environment?.ATELIER_REDIS_URL).toBe(first.environment!.ATELIER_REDIS_URL!);
      expect(service.volumes).toContain("./atelier.toml:/etc/atelier/atelier.toml:ro");
      expect(service.environment?.ATELIER_CONFIG).toBe("/etc/atelier/atelier.toml");
      // The database and Redis host names are services of this file, which the instance waits for.
      const dependsOn = service.depends_on as Record<string, { condition: string }>;
      for (const host of [new URL(service.environment!.ATELIER_DATABASE_URL!.replace(/\$\{[^}]*\}/g, "x")).hostname, new URL(service.environment!.ATELIER_REDIS_URL!).hostname]) {
        expect(compose.services[host]).toBeDefined();
        expect(dependsOn[host]?.condition).toBe("service_healthy");
      }
      expect(service.healthcheck?.test).toEqual(["CMD", "/usr/local/bin/atelier", "healthcheck"]);
      const grace = /^(\d+)s$/.exec(service.stop_grace_period ?? "");
      const shutdownGraceMs = (ConfigSchema.properties.server.properties.shutdown_grace_ms as TSchema).default as number;
      expect(Number(grace![1]) * 1000).toBeGreaterThan(shutdownGraceMs);
      // Only the proxy publishes a port.
      expect(service.ports).toBeUndefined();
    }
  });

  test("each instance keeps its own data_dir (its lock file), on a declared volume", () => {
    const dataVolumes = instances.map(([, s]) => s.volumes!.find((v) => v.endsWith(":/data"))!.split(":")[0]!);
    expect(new Set(dataVolumes).size).toBe(instances.length);
    for (const v of dataVolumes) expect(Object.keys(compose.volumes ?? {})).toContain(v);
  });

  test("every secret comes from .env (example.env names each one); none is written in the files", () => {
    const named = new Set(Object.values(compose.services).flatMap((s) => Object.values(s.environment ?? {}).flatMap(envNames)));
    named.delete("ATELIER_COMMIT");
    const documented = Object.keys(exampleEnv());
    for (const name of named) expect(documented).toContain(name);
    expect(compose.services.postgres!.environment!.POSTGRES_PASSWORD).toBe("${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in .env}");
  });

  test("nginx.conf sends to every instance on its port and is the only published port", () => {
    const nginx = read("nginx.conf");
    const servers = [...nginx.matchAll(/^\s*server\s+([a-z0-9-]+):(\d+)/gm)].map((m) => `${m[1]}:${m[2]}`);
    expect(servers.sort()).toEqual(instances.map(([name]) => `${name}:8080`).sort());
    // Streams must not be buffered, and a request an instance may have charged is not re-sent.
    expect(nginx).toMatch(/proxy_buffering off;/);
    expect(nginx).toMatch(/proxy_next_upstream error timeout;/);
    const proxy = compose.services.proxy!;
    expect(proxy.volumes).toContain("./nginx.conf:/etc/nginx/conf.d/default.conf:ro");
    expect(proxy.ports).toEqual(["8080:8080"]);
    const published = Object.values(compose.services).filter((s) => s.ports !== undefined);
    expect(published).toEqual([proxy]);
  });

  test("atelier.toml loads with the environment the compose file gives an instance: PostgreSQL, Redis, the bucket, one webhook key", () => {
    const env = containerEnv(instances[0]![1], exampleEnv());
    const config = loadConfig({ file: join(dir, "atelier.toml"), env });
    expect(config.database.url).toBe(`postgres://atelier:${exampleEnv().POSTGRES_PASSWORD}@postgres:5432/atelier`);
    expect(config.redis.url).toBe("redis://redis:6379");
    expect(config.server.host).toBe("0.0.0.0");
    expect(config.server.port).toBe(8080);
    expect(config.storage.kind).toBe("s3");
    expect(config.storage.endpoint).toBe("http://minio:9000");
    expect(config.storage.bucket).toBe("atelier-images");
    expect(config.storage.secret_access_key).toBe(exampleEnv().S3_SECRET_ACCESS_KEY);
    expect(config.webhooks.secret_key).toBe(exampleEnv().ATELIER_WEBHOOK_KEY);
    // The bucket the one-shot service makes is the one the instances use.
    expect(compose.services.bucket!.depends_on).toEqual({ minio: { condition: "service_healthy" } });
    expect(JSON.stringify(compose.services.bucket)).toContain(`local/${config.storage.bucket}`);
  });
});
