/**
 * The CLI as an operator uses it: real `atelier` processes against the data directory of a
 * server that is running meanwhile, whose effects the server sees on the next request.
 * Also: startup refusals (bad config, newer database), healthcheck, and a graceful SIGTERM.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { Database } from "bun:sqlite";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runCli } from "../../src/main";
import pkg from "../../package.json" with { type: "json" };
import { databasePath, latestVersion, openDatabase } from "../../src/store/database";
import { ATELIER_FROM_SOURCE, lastLine, runAtelier, startServerProcess } from "../support/process";
import { rawRequest } from "../support/rawHttp";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";

let server: TestServer;
const scratch: string[] = [];

beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server.close();
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
});

/** `atelier <args> --data <the running server's data dir>`, with no ATELIER_* in the environment. */
const cli = (...args: string[]) => runAtelier(ATELIER_FROM_SOURCE, [...args, "--data", server.dataDir], { env: server.childEnv });
const clientFor = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });

describe("CLI round trip while the server runs", () => {
  let key = "";
  let prefix = "";

  test("user add", async () => {
    const r = await cli("user", "add", "Alice@Example.com", "--credits", "5");
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout).toContain("Alice@Example.com");
    expect(r.stdout).toContain("5 credits");
    expect((await server.services.store.users.byEmail("alice@example.com"))?.credits).toBe(5);

    const again = await cli("user", "add", "alice@EXAMPLE.com");
    expect(again.code).not.toBe(0);
    expect(again.stdout).toBe("");
    expect(again.stderr).toContain("already exists");
  });

  test("key create prints the full key alone on the last stdout line, and it works at once", async () => {
    const r = await cli("key", "create", "alice@example.com", "--name", "laptop");
    expect(r).toMatchObject({ code: 0, stderr: "" });
    key = lastLine(r.stdout);
    expect(key).toMatch(/^sk-atl-[0-9A-Za-z]{43}$/);
    prefix = key.slice(0, "sk-atl-".length + 8);

    const client = clientFor(key);
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(expect.arrayContaining(["builtin-image", "builtin-chat"]));
    expect((await client.models.retrieve("builtin-chat")).id).toBe("builtin-chat");
  });

  test("key list shows the prefix, name and status, never the key", async () => {
    const r = await cli("key", "list", "alice@example.com");
    expect(r.code).toBe(0);
    const row = r.stdout.split("\n").find((l) => l.startsWith(prefix));
    expect(row).toContain("laptop");
    expect(row).toContain("active");
    expect(r.stdout).not.toContain(key);
  });

  test("user list", async () => {
    const r = await cli("user", "list");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/Alice@Example\.com\tuser\t5\tno\t/);
  });

  test("credits grant is usable on the next request", async () => {
    const bob = await cli("user", "add", "bob@example.com");
    expect(bob.code).toBe(0);
    const bobKey = lastLine((await cli("key", "create", "bob@example.com")).stdout);
    const client = clientFor(bobKey);
    const refused = await client.images.generate({ model: "builtin-image", prompt: "a lighthouse" }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(402);

    const grant = await cli("credits", "grant", "bob@example.com", "1", "--note", "welcome");
    expect(grant).toMatchObject({ code: 0, stderr: "" });
    expect(grant.stdout).toContain("balance 1");
    const image = await client.images.generate({ model: "builtin-image", prompt: "a lighthouse" });
    expect(image.data?.[0]?.b64_json?.length).toBeGreaterThan(100);
  });

  test("codes create prints the batch once as CSV; the running server redeems its codes", async () => {
    const r = await cli("codes", "create", "--credits", "3", "--count", "2", "--expires-days", "7", "--name", "cli batch");
    expect(r).toMatchObject({ code: 0, stderr: "" });
    const lines = r.stdout.trim().split(/\r?\n/);
    expect(lines[0]).toBe("code,credits,expires_at,batch_id,batch_name");
    expect(lines).toHaveLength(3);
    const [code, credits, , , name] = lines[1]!.split(",");
    expect(code).toMatch(/^[2-9A-HJ-NP-Z]{5}(-[2-9A-HJ-NP-Z]{5}){3}$/);
    expect([credits, name]).toEqual(["3", '"cli batch"']);
    const carol = await cli("user", "add", "carol@example.com");
    expect(carol.code).toBe(0);
    const carolId = (await server.services.store.users.byEmail("carol@example.com"))!.id;
    expect(await server.services.workbench.codes.redeem(carolId, code!, "cli-test")).toMatchObject({ ok: true, credits: 3, balance: 3 });
    const bad = await cli("codes", "create", "--credits", "0", "--count", "2");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--credits must be a positive integer");
  });

  test("key revoke <prefix>: the next request gets 401", async () => {
    const r = await cli("key", "revoke", prefix);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout).toContain(prefix);
    const refused = await clientFor(key).models.list().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((refused as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe("invalid_api_key");

    const twice = await cli("key", "revoke", prefix);
    expect(twice.code).not.toBe(0);
    expect(twice.stderr).toContain("already revoked");
    expect((await cli("key", "list", "alice@example.com")).stdout).toContain("revoked");
  });

  test("errors go to stderr with a non-zero exit", async () => {
    const cases: [string[], RegExp][] = [
      [["key", "create", "nobody@example.com"], /no user with email nobody@example.com/],
      [["key", "revoke", "sk-atl-nothing0"], /no key with prefix/],
      [["credits", "grant", "alice@example.com", "-3"], /must be a positive integer|Unknown option/],
      [["credits", "grant", "nobody@example.com", "3"], /no user/],
      [["user", "add", "not-an-email"], /valid email/],
      [["user", "add"], /takes one email/],
      [["user", "add", "p@example.com", "--password", "short"], /at least \d+ characters/],
      [["frobnicate"], /unknown command 'frobnicate'/],
      [["constructor"], /unknown command 'constructor'/],
      [["toString"], /unknown command 'toString'/],
      [["key", "create", "alice@example.com", "--bogus"], /Unknown option/],
    ];
    const results = await Promise.all(cases.map(([args]) => cli(...args)));
    results.forEach((r, i) => {
      const [args, pattern] = cases[i]!;
      expect({ args, code: r.code === 0 ? 0 : "non-zero", stdout: r.stdout }).toEqual({ args, code: "non-zero", stdout: "" });
      expect(r.stderr).toMatch(pattern);
    });
  });
});

describe("exit codes as the README states them", () => {
  /** In-process (cheaper than a process each): code, stdout and stderr of one command on the server's data. */
  async function run(...args: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli([...args, ...server.cliArgs], { out: (s) => out.push(s), err: (s) => err.push(s) });
    return { code, stdout: out.join("\n"), stderr: err.join("\n") };
  }

  test("1 for a command that cannot be carried out (unknown user or key, already revoked, taken email)", async () => {
    expect(await run("user", "add", "exit-codes@example.com")).toMatchObject({ code: 0 });
    const prefix = lastLine((await run("key", "create", "exit-codes@example.com")).stdout).slice(0, "sk-atl-".length + 8);
    expect(await run("key", "revoke", prefix)).toMatchObject({ code: 0 });
    for (const [args, message] of [
      [["credits", "grant", "nobody@example.com", "3"], "no user with email nobody@example.com"],
      [["key", "list", "nobody@example.com"], "no user with email nobody@example.com"],
      [["key", "revoke", "sk-atl-nothing0"], "no key with prefix sk-atl-nothing0"],
      [["key", "revoke", prefix], "already revoked"],
      [["user", "add", "EXIT-CODES@example.com"], "already exists"],
    ] as const) {
      const r = await run(...args);
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 1, stdout: "" });
      expect(r.stderr).toContain(message);
    }
  });

  test("a mistyped --data is an error, not a new empty database", async () => {
    const parent = tempDir();
    scratch.push(parent);
    const dir = join(parent, "typo");
    for (const args of [["key", "create", "exit-codes@example.com"], ["user", "list"], ["credits", "grant", "exit-codes@example.com", "1"]]) {
      const out: string[] = [];
      const err: string[] = [];
      expect(await runCli([...args, "--data", dir], { out: (s) => out.push(s), err: (s) => err.push(s) })).toBe(1);
      expect(out).toEqual([]);
      expect(err.join("\n")).toContain(`no database at ${join(dir, "atelier.db")}: check --data`);
    }
    expect(existsSync(dir)).toBe(false);
  });

  test("key revoke also takes the whole key (matched by hash), as someone revoking a leaked key has it", async () => {
    const key = lastLine((await run("key", "create", "exit-codes@example.com", "--name", "leaked")).stdout);
    const revoked = await run("key", "revoke", key);
    expect(revoked).toMatchObject({ code: 0, stderr: "" });
    expect(revoked.stdout).toBe(`revoked ${key.slice(0, "sk-atl-".length + 8)} of exit-codes@example.com`);
    expect(await run("key", "revoke", key)).toMatchObject({ code: 1, stderr: "atelier key: that key is already revoked" });
    const unknown = await run("key", "revoke", `sk-atl-${"x".repeat(43)}`);
    expect(unknown).toMatchObject({ code: 1, stdout: "" });
    expect(unknown.stderr).toContain("no such key");
    const refused = await clientFor(key).models.list().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  test("2 for a wrong command line: a negative number is named as such, stray arguments are not ignored", async () => {
    for (const [args, message] of [
      // node:util alone would say "Unknown option '-3'".
      [["credits", "grant", "exit-codes@example.com", "-3"], 'N must be a positive integer, got "-3"'],
      [["user", "add", "neg@example.com", "--credits", "-1"], '--credits must be a non-negative integer, got "-1"'],
      [["credits", "grant", "exit-codes@example.com", "abc"], 'N must be a positive integer, got "abc"'],
      [["credits", "grant", "exit-codes@example.com", "0"], 'N must be a positive integer, got "0"'],
      // Balances are JavaScript numbers: a huge grant would make later small ones vanish.
      [["credits", "grant", "exit-codes@example.com", "9007199254740991"], "N must be at most 1000000000"],
      [["user", "add", "huge@example.com", "--credits", "1000000001"], "--credits must be at most 1000000000"],
      [["user", "list", "extra"], 'user list takes no arguments, got "extra"'],
      [["openapi", "extra"], "openapi takes no arguments"],
      [["key", "create", "exit-codes@example.com", "--bogus"], "Unknown option '--bogus'"],
    ] as const) {
      const r = await run(...args);
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: "" });
      expect(r.stderr).toContain(message);
    }
    expect(await server.services.store.users.byEmail("neg@example.com")).toBeNull();
    expect(await server.services.store.users.byEmail("huge@example.com")).toBeNull();
    // A value that merely starts with a dash still works where text is expected.
    expect(await run("credits", "grant", "exit-codes@example.com", "2", "--note", "-2 was a typo")).toMatchObject({ code: 0, stderr: "" });
    expect((await server.services.store.credits.ledger((await server.services.store.users.byEmail("exit-codes@example.com"))!.id))[0]).toMatchObject({ amount: 2, note: "-2 was a typo" });
  });
});

describe("user password", () => {
  const signIn = (email: string, password: string) =>
    fetch(`${server.url}/signin`, {
      method: "POST",
      redirect: "manual",
      headers: { origin: server.url, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ email, password }),
    });

  test("a user added without a password is told how to get one; setting it lets them sign in and ends their other sessions", async () => {
    const out: string[] = [];
    const io = { out: (s: string) => out.push(s), err: (s: string) => out.push(`ERR ${s}`) };
    expect(await runCli(["user", "add", "nopass@example.com", ...server.cliArgs], io)).toBe(0);
    expect(out.join("\n")).toContain("cannot sign in to the workbench until `atelier user password nopass@example.com --password …`");
    expect((await signIn("nopass@example.com", "first password 1")).status).toBe(401);

    expect(await runCli(["user", "password", "NOPASS@example.com", "--password", "first password 1", ...server.cliArgs], io)).toBe(0);
    const first = await signIn("nopass@example.com", "first password 1");
    expect(first.status).toBe(303);
    const cookie = first.headers.get("set-cookie")!.split(";")[0]!;
    expect((await fetch(`${server.url}/session`, { headers: { cookie } })).status).toBe(200);

    expect(await runCli(["user", "password", "nopass@example.com", "--password", "second password 2", ...server.cliArgs], io)).toBe(0);
    expect(out.at(-1)).toBe("password set for nopass@example.com; their workbench sessions were ended");
    expect((await fetch(`${server.url}/session`, { headers: { cookie } })).status).toBe(401);
    expect((await signIn("nopass@example.com", "second password 2")).status).toBe(303);

    const err: string[] = [];
    const quiet = { out: () => {}, err: (s: string) => err.push(s) };
    expect(await runCli(["user", "password", "nopass@example.com", "--password", "short", ...server.cliArgs], quiet)).toBe(2);
    expect(await runCli(["user", "password", "nopass@example.com", ...server.cliArgs], quiet)).toBe(2);
    expect(await runCli(["user", "password", "nobody@example.com", "--password", "long enough 123", ...server.cliArgs], quiet)).toBe(1);
    expect(err.join("\n")).toContain("--password must be at least");
    expect(err.join("\n")).toContain("user password needs --password");
    expect(err.join("\n")).toContain("no user with email nobody@example.com");
  });
});

describe("--help everywhere", () => {
  const commands = [
    ["--help"],
    ["help"],
    ["serve", "--help"],
    ["user", "--help"],
    ["user", "add", "--help"],
    ["user", "list", "-h"],
    ["user", "password", "--help"],
    ["credits", "--help"],
    ["credits", "grant", "--help"],
    ["key", "--help"],
    ["key", "create", "--help"],
    ["key", "list", "--help"],
    ["key", "revoke", "--help"],
    ["upstreams", "--help"],
    ["openapi", "--help"],
    ["healthcheck", "--help"],
  ];
  for (const args of commands) {
    test(`atelier ${args.join(" ")}`, async () => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(args, { out: (s) => out.push(s), err: (s) => err.push(s) });
      expect({ code, err }).toEqual({ code: 0, err: [] });
      expect(out.join("\n")).toContain("Usage");
      expect(out.join("\n")).toContain("--data");
    });
  }

  test("--version (and -V): the package version and the commit from git, on stdout, exit 0", async () => {
    const commit = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: import.meta.dir }).stdout.toString().trim();
    for (const flag of ["--version", "-V"]) {
      const r = await runAtelier(ATELIER_FROM_SOURCE, [flag]);
      expect(r).toMatchObject({ code: 0, stderr: "" });
      expect(r.stdout.trim()).toBe(`atelier ${pkg.version} (${commit || "unknown"})`);
    }
  });

  test("no command: usage on stderr, exit 2", async () => {
    const out: string[] = [];
    const err: string[] = [];
    expect(await runCli([], { out: (s) => out.push(s), err: (s) => err.push(s) })).toBe(2);
    expect(out).toEqual([]);
    expect(err.join("\n")).toContain("Usage");
  });
});

describe("startup refusals and healthcheck", () => {
  test("a bad config file: exit 1 naming the key and the problem", async () => {
    const dir = tempDir();
    scratch.push(dir);
    const file = join(dir, "atelier.toml");
    writeFileSync(file, `[server]\nport = "http"\n`);
    const r = await runAtelier(ATELIER_FROM_SOURCE, ["serve", "--config", file, "--data", dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("server.port: Expected integer");
    writeFileSync(file, `[limits]\nconcurency = 3\n`);
    const unknown = await runAtelier(ATELIER_FROM_SOURCE, ["user", "list"], { env: { ATELIER_CONFIG: file, ATELIER_DATA: dir } });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("limits.concurency: unknown key");
  });

  test("an unset ${VAR} in an upstream account: user, key, openapi and backup work; serve and upstreams stop naming it", async () => {
    const dir = tempDir();
    scratch.push(dir);
    const file = join(dir, "atelier.toml");
    writeFileSync(
      file,
      `[[upstreams]]\nid = "up"\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n[[upstreams.accounts]]\nid = "a"\napi_key = "\${UNSET_UP_KEY}"\n` +
        `[[models]]\nid = "remote"\nkind = "image"\nupstream = "up"\n`,
    );
    const env = { ATELIER_CONFIG: file, ATELIER_DATA: dir };
    expect(await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "nosecret@example.com", "--credits", "3"], { env })).toMatchObject({ code: 0, stderr: "" });
    expect(await runAtelier(ATELIER_FROM_SOURCE, ["credits", "grant", "nosecret@example.com", "2"], { env })).toMatchObject({ code: 0, stderr: "" });
    const key = await runAtelier(ATELIER_FROM_SOURCE, ["key", "create", "nosecret@example.com"], { env });
    expect(key).toMatchObject({ code: 0, stderr: "" });
    expect((await runAtelier(ATELIER_FROM_SOURCE, ["user", "list"], { env })).stdout).toContain("nosecret@example.com");
    expect((await runAtelier(ATELIER_FROM_SOURCE, ["openapi"], { env })).code).toBe(0);
    expect(await runAtelier(ATELIER_FROM_SOURCE, ["backup", join(dir, "copy.db")], { env })).toMatchObject({ code: 0, stderr: "" });
    for (const args of [["serve", "--port", "0", "--host", "127.0.0.1"], ["upstreams"]]) {
      const r = await runAtelier(ATELIER_FROM_SOURCE, args, { env });
      expect({ args, code: r.code }).toEqual({ args, code: 1 });
      expect(r.stderr).toContain("upstreams[0].accounts[0].api_key: environment variable UNSET_UP_KEY is not set");
      expect(r.stdout).not.toContain('"listening"');
    }
  });

  test("a database from a newer atelier: serve refuses to start and leaves it alone", async () => {
    const dir = tempDir();
    scratch.push(dir);
    openDatabase(dir).close();
    const db = new Database(databasePath(dir));
    db.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)").run(latestVersion() + 5);
    db.close();
    const r = await runAtelier(ATELIER_FROM_SOURCE, ["serve", "--data", dir, "--port", "0", "--host", "127.0.0.1"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`schema version ${latestVersion() + 5}`);
    expect(r.stderr).toContain("newer atelier");
    expect(r.stdout).not.toContain('"listening"');
  });

  test("healthcheck: 0 against a live server, 1 against nothing", async () => {
    const ok = await runAtelier(ATELIER_FROM_SOURCE, ["healthcheck", "--url", server.url]);
    expect(ok.code).toBe(0);
    const port = new URL(server.url).port;
    const down = await runAtelier(ATELIER_FROM_SOURCE, ["healthcheck"], { env: { ATELIER_PORT: "1" } });
    expect(down.code).toBe(1);
    expect(down.stderr).toContain("127.0.0.1:1");
    expect(port).not.toBe("1");
  });
});

describe("SIGTERM", () => {
  test("stops accepting, lets the in-flight request finish, closes the database, exits 0", async () => {
    const dir = tempDir();
    scratch.push(dir);
    const proc = await startServerProcess(ATELIER_FROM_SOURCE, ["--data", dir, "--port", "0", "--host", "127.0.0.1"]);
    const created = await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "term@example.com", "--data", dir]);
    expect(created.code).toBe(0);
    const apiKey = lastLine((await runAtelier(ATELIER_FROM_SOURCE, ["key", "create", "term@example.com", "--data", dir])).stdout);

    // A chat request whose body arrives in two halves, with SIGTERM in between.
    const body = JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "still there?" }] });
    const half = Math.floor(body.length / 2);
    let signalled = false;
    const inflight = rawRequest(
      proc.url,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${apiKey}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}`,
      (async function* () {
        yield body.slice(0, half);
        proc.proc.kill("SIGTERM");
        signalled = true;
        await proc.waitForLog("shutting down");
        yield body.slice(half);
      })(),
    );
    const res = await inflight;
    expect(signalled).toBe(true);
    expect(res.status).toBe(200);
    expect((JSON.parse(res.body) as { object: string }).object).toBe("chat.completion");

    expect(await proc.proc.exited).toBe(0);
    expect(proc.lines.some((l) => l.includes('"stopped"'))).toBe(true);
    // Closed cleanly: the last connection's close checkpointed and removed the WAL file.
    expect(existsSync(`${databasePath(dir)}-wal`)).toBe(false);
    const reopened = openDatabase(dir);
    expect(reopened.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM users").get()!.n).toBe(1);
    reopened.close();
    // And nothing listens any more.
    expect(await fetch(`${proc.url}/healthz`).then(() => "answered", () => "refused")).toBe("refused");
  });
});
