import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { TSchema } from "@sinclair/typebox";
import { ConfigError, ConfigSchema, loadConfig, unresolvedUpstreamSecrets } from "../src/config";
import { MAX_TIMER_MS } from "../src/core/timerDelay";

const dir = mkdtempSync(join(tmpdir(), "atelier-config-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(toml: string): string {
  const path = join(dir, `c${++n}.toml`);
  writeFileSync(path, toml);
  return path;
}

function errorOf(toml: string, env: Record<string, string> = {}): string {
  try {
    loadConfig({ file: file(toml), env });
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as Error).message;
  }
  throw new Error("expected a ConfigError");
}

describe("loadConfig", () => {
  test("no file at all gives the embedded defaults", () => {
    const c = loadConfig({ env: {} });
    expect(c.server.port).toBe(8080);
    expect(c.server.host).toBe("0.0.0.0");
    expect(c.server.data_dir).toBe(resolve("./data"));
    expect(c.server.builtin_image).toBe(true);
    expect(c.server.builtin_chat).toBe(true);
    expect(c.upstreams).toEqual([]);
    expect(c.models).toEqual([]);
  });

  test("environment overrides the file, command-line overrides the environment", () => {
    const path = file(`[server]\nport = 9000\nhost = "127.0.0.1"\ndata_dir = "/tmp/from-file"\n`);
    const fromFile = loadConfig({ file: path, env: {} });
    expect(fromFile.server.port).toBe(9000);
    expect(fromFile.server.data_dir).toBe("/tmp/from-file");
    const fromEnv = loadConfig({ env: { ATELIER_CONFIG: path, ATELIER_PORT: "9100", ATELIER_DATA: "/tmp/from-env", ATELIER_HOST: "::1" } });
    expect([fromEnv.server.port, fromEnv.server.data_dir, fromEnv.server.host]).toEqual([9100, "/tmp/from-env", "::1"]);
    const fromFlags = loadConfig({ file: path, env: { ATELIER_PORT: "9100" }, overrides: { port: 0, data_dir: "/tmp/from-flag" } });
    expect([fromFlags.server.port, fromFlags.server.data_dir]).toEqual([0, "/tmp/from-flag"]);
  });

  test("${ENV} in strings is substituted", () => {
    const c = loadConfig({
      file: file(`[[upstreams]]\nid = "o"\nkind = "openai"\nbase_url = "\${BASE}/v1"\n[[upstreams.accounts]]\nid = "a"\napi_key = "\${SECRET_KEY}"\n`),
      env: { BASE: "http://127.0.0.1:1", SECRET_KEY: "sk-upstream" },
    });
    expect(c.upstreams[0]!.base_url).toBe("http://127.0.0.1:1/v1");
    expect(c.upstreams[0]!.accounts[0]!.api_key).toBe("sk-upstream");
  });

  test("an unknown key is named", () => {
    expect(errorOf(`[server]\nprot = 8080\n`)).toMatch(/: server\.prot: unknown key$/);
    expect(errorOf(`[sever]\nport = 1\n`)).toMatch(/: sever: unknown key$/);
  });

  test("a wrong type names the key, the rule and the value", () => {
    const message = errorOf(`[server]\nport = "eighty"\n`);
    expect(message).toContain("server.port: Expected integer");
    expect(message).toContain('"eighty"');
    expect(errorOf(`[limits]\nqueue_size = -1\n`)).toContain("limits.queue_size: Expected integer to be greater or equal to 0");
  });

  test("a choice lists the allowed values", () => {
    expect(errorOf(`[workbench]\nregistration = "maybe"\n`)).toContain('workbench.registration: must be one of "open", "closed", got "maybe"');
  });

  test("an unset ${ENV} names the key and the variable, and the file", () => {
    const message = errorOf(`[[upstreams]]\nid = "o"\nkind = "openai"\nbase_url = "http://x"\n[[upstreams.accounts]]\nid = "a"\napi_key = "\${NOT_SET_ANYWHERE}"\n`);
    expect(message).toContain("upstreams[0].accounts[0].api_key: environment variable NOT_SET_ANYWHERE is not set");
    expect(message).toContain(".toml");
  });

  test('upstreamSecrets "defer": an unset ${ENV} in an upstream account stays as written and is listed; elsewhere it still fails', () => {
    const toml = `[[upstreams]]\nid = "o"\nkind = "openai"\nbase_url = "http://x"\n[[upstreams.accounts]]\nid = "a"\napi_key = "\${NOT_SET_ANYWHERE}"\n[[upstreams.accounts]]\nid = "b"\napi_key = "\${SET_KEY}"\n`;
    const c = loadConfig({ file: file(toml), env: { SET_KEY: "sk-set" }, upstreamSecrets: "defer" });
    expect(c.upstreams[0]!.accounts.map((a) => a.api_key)).toEqual(["\${NOT_SET_ANYWHERE}", "sk-set"]);
    expect(unresolvedUpstreamSecrets(c)).toEqual(["upstreams[0].accounts[0].api_key (NOT_SET_ANYWHERE)"]);
    expect(unresolvedUpstreamSecrets(loadConfig({ file: file(toml), env: { NOT_SET_ANYWHERE: "x", SET_KEY: "y" } }))).toEqual([]);
    expect(() => loadConfig({ file: file(toml), env: { SET_KEY: "sk-set" } })).toThrow("environment variable NOT_SET_ANYWHERE is not set");
    expect(() => loadConfig({ file: file(`[server]\npublic_url = "\${NOT_SET_URL}"\n`), env: {}, upstreamSecrets: "defer" })).toThrow(
      "server.public_url: environment variable NOT_SET_URL is not set",
    );
  });

  test("a secret of the wrong type is not echoed", () => {
    const message = errorOf(`[[upstreams]]\nid = "o"\nkind = "openai"\nbase_url = "http://x"\n[[upstreams.accounts]]\nid = "a"\napi_key = 98765432123\n`);
    expect(message).toContain("upstreams[0].accounts[0].api_key");
    expect(message).not.toContain("98765432123");
  });

  test("default_image_model must name an image model of the configuration", () => {
    expect(errorOf(`[server]\ndefault_image_model = "builtin-chat"\n`)).toContain('server.default_image_model: "builtin-chat" is not an image model');
    expect(errorOf(`[server]\nbuiltin_image = false\ndefault_image_model = "builtin-image"\n`)).toContain("server.default_image_model");
    expect(loadConfig({ file: file(`[server]\ndefault_image_model = "builtin-image"\n`), env: {} }).server.default_image_model).toBe("builtin-image");
  });

  test("public_url and upstream base_url must be absolute http(s) URLs (a base URL is not echoed: it may hold credentials)", () => {
    expect(errorOf(`[server]\npublic_url = "atelier.example.com"\n`)).toContain('server.public_url: must be an absolute http:// or https:// URL, got "atelier.example.com"');
    expect(loadConfig({ file: file(`[server]\npublic_url = "https://atelier.example.com"\n`), env: {} }).server.public_url).toBe("https://atelier.example.com");
    const message = errorOf(`[[upstreams]]\nid = "sd"\nkind = "sdwebui"\nbase_url = "localhost:7860"\n[[upstreams.accounts]]\nid = "a"\n`);
    expect(message).toContain("upstreams[0].base_url: must be an absolute http:// or https:// URL");
    expect(message).not.toContain("localhost:7860");
  });

  test('the upstream id "builtin" is reserved, and a model cannot name "builtin" as its upstream', () => {
    const upstream = (id: string) => `[[upstreams]]\nid = "${id}"\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\n[[upstreams.accounts]]\nid = "a"\n`;
    expect(errorOf(`${upstream("sd")}${upstream("builtin")}`)).toMatch(
      /^upstreams\[1\]\.id: "builtin" is reserved for the built-in engines \(builtin-image, builtin-chat\); give this upstream another id$/,
    );
    expect(errorOf(`${upstream("builtin")}[[models]]\nid = "pic"\nkind = "image"\nupstream = "builtin"\n`)).toContain('upstreams[0].id: "builtin" is reserved');
    expect(errorOf(`[[models]]\nid = "pic"\nkind = "image"\nupstream = "builtin"\n`)).toContain(
      'models[0].upstream: "builtin" is not an upstream; the built-in models are builtin-image and builtin-chat',
    );
    // Only the exact id is reserved: names that merely start with it are ordinary upstreams.
    const c = loadConfig({ file: file(`${upstream("builtin2")}[[models]]\nid = "pic"\nkind = "image"\nupstream = "builtin2"\n`), env: {} });
    expect(c.upstreams.map((u) => u.id)).toEqual(["builtin2"]);
  });

  test("invalid TOML, a missing file and a bad ATELIER_PORT are reported", () => {
    expect(errorOf(`[server\n`)).toContain("invalid TOML");
    expect(() => loadConfig({ file: join(dir, "absent.toml"), env: {} })).toThrow(/cannot read config file/);
    expect(() => loadConfig({ env: { ATELIER_PORT: "eighty" } })).toThrow(/ATELIER_PORT: expected an integer/);
  });
});

describe("model prices", () => {
  const upstream = `[[upstreams]]\nid = "oa"\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\naccounts = [{ id = "a", api_key = "k" }]\n`;
  test("an image model's price is read, and the built-in model's comes from [server] builtin_image_price (default 1)", () => {
    const config = loadConfig({ file: file(`[server]\nbuiltin_image_price = 0\n${upstream}[[models]]\nid = "x"\nkind = "image"\nupstream = "oa"\nprice = 4\n`), env: {} });
    expect(config.models[0]!.price).toBe(4);
    expect(config.server.builtin_image_price).toBe(0);
    expect(loadConfig({ env: {} }).server.builtin_image_price).toBe(1);
  });
  test("a negative, fractional or huge price, and a price on a chat model, are refused with the key's path", () => {
    for (const bad of ["-1", "1.5", "1000001"]) {
      expect(errorOf(`${upstream}[[models]]\nid = "x"\nkind = "image"\nupstream = "oa"\nprice = ${bad}\n`)).toContain("models[0].price");
    }
    expect(errorOf(`${upstream}[[models]]\nid = "c"\nkind = "chat"\nupstream = "oa"\nprice = 2\n`)).toBe("models[0].price: chat models are free; price applies to image models only");
  });
});

describe("[redis]", () => {
  test("unset by default (in-memory gates); the file or ATELIER_REDIS_URL sets it, the environment winning", () => {
    const none = loadConfig({ env: {} });
    expect(none.redis).toEqual({ key_prefix: "atelier:" });
    const fromFile = loadConfig({ file: file('[redis]\nurl = "redis://10.0.0.5:6379"\nkey_prefix = "prod:"\n'), env: {} });
    expect(fromFile.redis).toEqual({ url: "redis://10.0.0.5:6379", key_prefix: "prod:" });
    const fromEnv = loadConfig({ file: file('[redis]\nurl = "redis://10.0.0.5:6379"\n'), env: { ATELIER_REDIS_URL: "rediss://cache.internal:6380" } });
    expect(fromEnv.redis.url).toBe("rediss://cache.internal:6380");
  });

  test("a URL that is not redis:// is refused without echoing it (it may carry a password)", () => {
    const message = errorOf('[redis]\nurl = "http://:hunter2secret@cache:6379"\n');
    expect(message).toContain("redis.url");
    expect(message).not.toContain("hunter2secret");
  });
});

describe("[database] url", () => {
  test("unset by default (SQLite in data_dir); the file, with ${ENV} for the password, or ATELIER_DATABASE_URL sets it, the environment winning", () => {
    expect(loadConfig({ env: {} }).database).toEqual({ busy_wait_ms: 10_000 });
    const fromFile = loadConfig({ file: file('[database]\nurl = "postgres://atelier:${PG_PASSWORD}@db.internal:5432/atelier"\n'), env: { PG_PASSWORD: "s3cret" } });
    expect(fromFile.database).toEqual({ busy_wait_ms: 10_000, url: "postgres://atelier:s3cret@db.internal:5432/atelier" });
    const fromEnv = loadConfig({ file: file('[database]\nurl = "postgres://db.internal/atelier"\n'), env: { ATELIER_DATABASE_URL: "postgresql://other.internal:6432/atelier" } });
    expect(fromEnv.database.url).toBe("postgresql://other.internal:6432/atelier");
    expect(loadConfig({ env: { ATELIER_DATABASE_URL: "postgres://db/atelier" } }).database.url).toBe("postgres://db/atelier");
  });

  test("a URL that is not postgres://, or does not parse, is refused without echoing it (it may carry a password)", () => {
    const wrongScheme = errorOf('[database]\nurl = "mysql://root:hunter2secret@db:3306/atelier"\n');
    expect(wrongScheme).toContain("database.url");
    expect(wrongScheme).not.toContain("hunter2secret");
    const unparsable = errorOf('[database]\nurl = "postgres://root:hunter2secret@db:notaport/atelier"\n');
    expect(unparsable).toContain("database.url: not a valid URL");
    expect(unparsable).not.toContain("hunter2secret");
    const unsetSecret = errorOf('[database]\nurl = "postgres://root:${NO_SUCH_PG_PASSWORD}@db/atelier"\n');
    expect(unsetSecret).toContain("NO_SUCH_PG_PASSWORD is not set");
  });
});

describe("[storage] kind", () => {
  const s3 = (extra = "") =>
    `[storage]\nkind = "s3"\nbucket = "imgs"\nendpoint = "http://127.0.0.1:9000"\naccess_key_id = "\${S3_ID}"\nsecret_access_key = "\${S3_SECRET}"\n${extra}`;

  test("files by default (today's folder); s3 takes its bucket and credentials through ${ENV}", () => {
    const none = loadConfig({ env: {} });
    expect(none.storage).toMatchObject({ kind: "files", prefix: "", timeout_ms: 10_000 });
    expect(none.storage.bucket).toBeUndefined();
    const c = loadConfig({ file: file(s3('prefix = "atelier/"\n')), env: { S3_ID: "AKIDEXAMPLE", S3_SECRET: "s3cr3t-from-env" } });
    expect(c.storage).toMatchObject({ kind: "s3", bucket: "imgs", endpoint: "http://127.0.0.1:9000", access_key_id: "AKIDEXAMPLE", secret_access_key: "s3cr3t-from-env", prefix: "atelier/" });
  });

  test("s3 without its bucket or credentials, with a folder, or with a bad endpoint is refused; s3 keys under files too", () => {
    const env = { S3_ID: "AKIDEXAMPLE", S3_SECRET: "s3cr3t-from-env" };
    expect(errorOf('[storage]\nkind = "s3"\naccess_key_id = "a"\nsecret_access_key = "b"\n')).toContain('storage.bucket: required with kind = "s3"');
    expect(errorOf('[storage]\nkind = "s3"\nbucket = "x"\nsecret_access_key = "b"\n')).toContain("storage.access_key_id: required");
    expect(errorOf('[storage]\nkind = "s3"\nbucket = "x"\naccess_key_id = "a"\n')).toContain("storage.secret_access_key: required");
    expect(errorOf(s3('dir = "/tmp/x"\n'), env)).toContain('storage.dir: only with kind = "files"');
    expect(errorOf(s3('prefix = "/abs/"\n'), env)).toContain("storage.prefix");
    expect(errorOf('[storage]\nbucket = "imgs"\n')).toContain('storage.bucket: only with kind = "s3"');
    expect(errorOf('[storage]\nkind = "minio"\n')).toContain('must be one of "files", "s3"');
    expect(errorOf(s3(), { S3_ID: "AKIDEXAMPLE" })).toContain("environment variable S3_SECRET is not set");
  });

  test("neither an endpoint (it may carry credentials) nor a wrong-typed secret is echoed", () => {
    const env = { S3_ID: "AKIDEXAMPLE", S3_SECRET: "s3cr3t-from-env" };
    const endpoint = errorOf(s3().replace("http://127.0.0.1:9000", "ftp://user:pw-in-url@host"), env);
    expect(endpoint).toContain("storage.endpoint");
    expect(endpoint).not.toContain("pw-in-url");
    const typed = errorOf('[storage]\nkind = "s3"\nbucket = "x"\naccess_key_id = 12345678\nsecret_access_key = 987654321\n');
    expect(typed).toContain("storage.access_key_id");
    expect(typed).not.toContain("12345678");
  });
});

describe("durations", () => {
  const UNIT_MS = { ms: 1, s: 1_000, hours: 3_600_000, days: 86_400_000 } as const;
  type Unit = keyof typeof UNIT_MS;
  interface DurationKey {
    /** "limits.queue_timeout_ms", "upstreams[].timeout_ms" */
    path: string;
    schema: TSchema;
    unit: Unit;
  }

  /** Every key named for a duration (…_ms, …_s, …_hours, …_days; not a rate, …_per_s), found by walking the schema so none is left out. */
  function durationKeys(schema: TSchema, path: string): DurationKey[] {
    if (schema.type === "array") return durationKeys(schema.items as TSchema, `${path}[]`);
    const found: DurationKey[] = [];
    for (const [key, child] of Object.entries((schema.properties as Record<string, TSchema> | undefined) ?? {})) {
      const at = path ? `${path}.${key}` : key;
      const unit = /_(ms|s|hours|days)$/.exec(key)?.[1] as Unit | undefined;
      if (unit && !key.endsWith("_per_s")) found.push({ path: at, schema: child.type === "array" ? (child.items as TSchema) : child, unit });
      else found.push(...durationKeys(child, at));
    }
    return found;
  }
  const durations = durationKeys(ConfigSchema, "");

  test("every duration has a maximum; one in ms or s (they go to timers) stays within setTimeout's 2^31 - 1 ms", () => {
    expect(durations.map((d) => d.path)).toContain("storage.sweep_interval_s");
    expect(durations.length).toBeGreaterThan(25);
    for (const { path, schema, unit } of durations) {
      expect({ path, maximum: typeof schema.maximum }).toEqual({ path, maximum: "number" });
      const maxMs = (schema.maximum as number) * UNIT_MS[unit];
      // Hours and days become expiry timestamps, not timers: bounded to keep them exact.
      const bound = unit === "ms" || unit === "s" ? MAX_TIMER_MS : 10 * 366 * UNIT_MS.days;
      expect({ path, maxMs, within: maxMs <= bound }).toEqual({ path, maxMs, within: true });
    }
  });

  /** A file setting the key to `value` (an upstream entry around upstreams[] keys). */
  function withValue(path: string, value: number): string {
    const [section, key] = path.split(".") as [string, string];
    if (section === "upstreams[]") return `[[upstreams]]\nid = "o"\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\n${key} = ${value}\n[[upstreams.accounts]]\nid = "a"\n`;
    return `[${section}]\n${key} = ${value}\n`;
  }

  test("one past its maximum is refused at start, naming the key, the maximum and the value; the maximum itself loads", () => {
    for (const { path, schema } of durations) {
      if (path === "webhooks.retry_delays_ms") continue; // an array: below
      const max = schema.maximum as number;
      expect(errorOf(withValue(path, max + 1))).toEndWith(`${path.replace("[]", "[0]")}: Expected integer to be less or equal to ${max}, got ${max + 1}`);
      // The lease must stay at least two heartbeats, so the longest heartbeat comes with a longer lease.
      const lease = path === "instance.heartbeat_ms" ? `lease_ms = ${2 * max}\n` : "";
      expect(() => loadConfig({ file: file(withValue(path, max) + lease), env: {} })).not.toThrow();
    }
    expect(errorOf(`[webhooks]\nretry_delays_ms = [1000, 604800001]\n`)).toContain("webhooks.retry_delays_ms[1]: Expected integer to be less or equal to 604800000");
  });

  test("the values that overflowed a timer are refused: a queue timeout, a shutdown grace, a sweep interval", () => {
    expect(errorOf(`[limits]\nqueue_timeout_ms = 3000000000\n`)).toEndWith("limits.queue_timeout_ms: Expected integer to be less or equal to 3600000, got 3000000000");
    expect(errorOf(`[server]\nshutdown_grace_ms = 3000000000\n`)).toEndWith("server.shutdown_grace_ms: Expected integer to be less or equal to 86400000, got 3000000000");
    expect(errorOf(`[storage]\nsweep_interval_s = 2600000\n`)).toEndWith("storage.sweep_interval_s: Expected integer to be less or equal to 604800, got 2600000");
  });
});

describe("secrets in config errors", () => {
  test("a value where a table holding a secret belongs is not echoed: the error names the key and the type only", () => {
    const cases: [string, string, string][] = [
      ['database = "postgres://atelier:Hunter2Secret@db:5432/atelier"\n', "database: Expected object", "Hunter2Secret"],
      ['redis = "redis://:RedisPw99@cache:6379"\n', "redis: Expected object", "RedisPw99"],
      ['[[upstreams]]\nid = "u"\nkind = "openai"\nbase_url = "https://api.example.com/v1"\naccounts = ["sk-live-ABCDEF123456"]\n', "upstreams[0].accounts[0]: Expected object", "sk-live-ABCDEF123456"],
      ['[[upstreams]]\nid = "u"\nkind = "openai"\nbase_url = "https://api.example.com/v1"\naccounts = "sk-live-ABCDEF123456"\n', "upstreams[0].accounts: Expected array", "sk-live-ABCDEF123456"],
      ['upstreams = "https://user:UpPass77@api.example.com/v1"\n', "upstreams: Expected array", "UpPass77"],
      ['storage = "S3SecretKeyValue"\n', "storage: Expected object", "S3SecretKeyValue"],
      ['metrics = "metrics-token-0123456789"\n', "metrics: Expected object", "metrics-token-0123456789"],
      ["[webhooks]\nsecret_key = 12345678901\n", "webhooks.secret_key: Expected string", "12345678901"],
      ["[metrics]\ntoken = 12345678901\n", "metrics.token: Expected string", "12345678901"],
      ['[[upstreams]]\nid = "u"\nkind = "openai"\nbase_url = 12345678901\n[[upstreams.accounts]]\nid = "a"\n', "upstreams[0].base_url: Expected string", "12345678901"],
    ];
    for (const [toml, expected, secret] of cases) {
      const message = errorOf(toml);
      expect({ toml, message: message.slice(message.indexOf(".toml: ") + 7) }).toEqual({ toml, message: expected });
      expect(message).not.toContain(secret);
    }
  });

  test("credentials in an echoed URL are blanked; a table or an array is named, not shown", () => {
    const choice = errorOf('[workbench]\nregistration = "https://admin:PwInUrl99@example.com/signup"\n');
    expect(choice).toEndWith('workbench.registration: must be one of "open", "closed", got "https://***@example.com/signup"');
    // The blanking comes before the cut to 60 characters, which would otherwise keep the password and drop its "@".
    const long = errorOf(`[server]\nport = "postgres://atelier:${"p".repeat(40)}Hunter2Secret@db/atelier"\n`);
    expect(long).toContain('server.port: Expected integer, got "postgres://***@db/atelier"');
    // An "@" in the password, unencoded, does not leave its tail behind.
    expect(errorOf('[server]\nport = "redis://:Pw@Tail99@cache:6379"\n')).toEndWith('got "redis://***@cache:6379"');
    const publicUrl = errorOf('[server]\npublic_url = "ftp://user:PwInUrl99@files.example.com"\n');
    expect(publicUrl).toEndWith('server.public_url: must be an absolute http:// or https:// URL, got "ftp://***@files.example.com"');
    expect(errorOf('[server]\nhost = { url = "x", password = "PwInTable99" }\n')).toEndWith("server.host: Expected string, got a table");
    expect(errorOf('[server]\nhost = ["sk-live-ABCDEF123456"]\n')).toEndWith("server.host: Expected string, got an array");
  });
});

describe("[server] body sizes", () => {
  test("an in-flight budget below the largest body a route accepts is refused (such a body would get 429 for ever); equal is fine", () => {
    expect(errorOf("[server]\nmax_body_bytes = 1048576\nmax_inflight_body_bytes = 4096\n")).toBe(
      "server.max_inflight_body_bytes: must be at least max_body_bytes (1048576), got 4096 (a body larger than the budget is never admitted: 429 server_busy for ever)",
    );
    expect(errorOf("[server]\nmax_body_bytes = 4096\nmax_form_body_bytes = 8192\nmax_inflight_body_bytes = 4096\n")).toStartWith(
      "server.max_inflight_body_bytes: must be at least max_form_body_bytes (8192), got 4096",
    );
    // The default budget (512 MiB) is below a raised max_body_bytes too.
    expect(errorOf("[server]\nmax_body_bytes = 1073741824\n")).toStartWith("server.max_inflight_body_bytes: must be at least max_body_bytes (1073741824), got 536870912");
    const equal = loadConfig({ file: file("[server]\nmax_body_bytes = 1048576\nmax_form_body_bytes = 1048576\nmax_inflight_body_bytes = 1048576\n"), env: {} });
    expect(equal.server.max_inflight_body_bytes).toBe(1_048_576);
  });
});
