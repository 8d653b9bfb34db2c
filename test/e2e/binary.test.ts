/**
 * The deliverable: `bun run build` gives one executable that runs from an empty directory with
 * nothing beside it, makes users and keys with its own CLI, and serves the API and /docs.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import OpenAI from "openai";
import { copyFileSync, existsSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ATELIER_FROM_SOURCE, lastLine, REPO, runAtelier, startServerProcess, type ServerProcess } from "../support/process";
import { tempDir } from "../support/tempDirs";
import pkg from "../../package.json" with { type: "json" };
import encodeWebp from "@jsquash/webp/encode.js";
import { dataUrl, makePng } from "../support/images";
import { interlacedZerosBomb } from "../support/imageBombs";

const binDir = tempDir("atelier-bin-");
const workDir = tempDir("atelier-run-");
const decoyData = join(tempDir("atelier-decoy-"), "data");
const binary = [join(binDir, "atelier")];
let server: ServerProcess;

beforeAll(async () => {
  const build = Bun.spawnSync([process.execPath, "run", "build"], { cwd: REPO, stdout: "pipe", stderr: "pipe" });
  if (build.exitCode !== 0) throw new Error(`bun run build failed:\n${build.stdout}\n${build.stderr}`);
  copyFileSync(join(REPO, "dist/atelier"), binary[0]!);
  Bun.spawnSync(["chmod", "755", binary[0]!]);
  // Built with --no-compile-autoload-dotenv: a .env in the working directory must be ignored.
  writeFileSync(join(workDir, ".env"), `ATELIER_DATA=${decoyData}\n`);
  // NODE_ENV=production switches Elysia's own error messages to terse ones; ours must not change.
  server = await startServerProcess(binary, ["--port", "0", "--host", "127.0.0.1"], { cwd: workDir, env: { NODE_ENV: "production" } });
});

afterAll(async () => {
  await server?.stop();
  for (const d of [binDir, workDir, join(decoyData, "..")]) rmSync(d, { recursive: true, force: true });
});

describe("the compiled binary", () => {
  test("is alone in its directory and keeps its data in ./data of the working directory", () => {
    expect(readdirSync(binDir)).toEqual(["atelier"]);
    expect(statSync(binary[0]!).size).toBeGreaterThan(10_000_000);
    expect(existsSync(join(workDir, "data", "atelier.db"))).toBe(true);
    expect(existsSync(decoyData)).toBe(false);
  });

  test("its CLI makes a user and a key that the running server accepts, via the openai client", async () => {
    const user = await runAtelier(binary, ["user", "add", "binary@example.com", "--credits", "2"], { cwd: workDir });
    expect(user).toMatchObject({ code: 0, stderr: "" });
    const created = await runAtelier(binary, ["key", "create", "binary@example.com"], { cwd: workDir });
    expect(created.code).toBe(0);
    const key = lastLine(created.stdout);
    expect(key).toMatch(/^sk-atl-/);

    const client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(expect.arrayContaining(["builtin-image", "builtin-chat"]));

    // Validation errors keep their detail in the compiled build, under NODE_ENV=production too.
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "wizard", content: "hi" }] }),
    });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { param: string; message: string } };
    expect(error.param).toBe("messages[0].role");
    expect(error.message).toContain("messages[0].role");
  });

  test("serves /docs with its embedded assets, and the same OpenAPI document as the source", async () => {
    const html = await (await fetch(`${server.url}/docs`)).text();
    expect(html).toContain("/docs/assets/swagger-ui-bundle.js");
    expect(html).not.toMatch(/https?:\/\//);
    const bundle = await fetch(`${server.url}/docs/assets/swagger-ui-bundle.js`);
    expect(bundle.status).toBe(200);
    expect((await bundle.text()).length).toBeGreaterThan(500_000);
    const css = await fetch(`${server.url}/docs/assets/swagger-ui.css`);
    expect(css.status).toBe(200);
    await css.arrayBuffer();
    const served = await (await fetch(`${server.url}/openapi.json`)).json();
    // From a fresh process: in this one, earlier test files' apps may have touched shared schemas.
    const fromSource = await runAtelier(ATELIER_FROM_SOURCE, ["openapi"], { env: {} });
    expect(fromSource.code).toBe(0);
    expect(served).toEqual(JSON.parse(fromSource.stdout));
  });

  test("shows the version and the commit baked in at build time (it runs outside any git checkout)", async () => {
    const commit = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: REPO }).stdout.toString().trim();
    expect(commit).toMatch(/^[0-9a-f]{4,40}$/);
    const r = await runAtelier(binary, ["--version"], { cwd: workDir });
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout.trim()).toBe(`atelier ${pkg.version} (${commit})`);
    expect(await (await fetch(`${server.url}/healthz`)).json()).toEqual({ status: "ok", version: pkg.version, commit });
    const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as { info: { version: string } };
    expect(doc.info.version).toBe(pkg.version);
  });

  test("decodes images in its worker pool (a second entrypoint): PNG and WebP references work, the 1 GiB PNG bomb is a 400", async () => {
    await runAtelier(binary, ["user", "add", "decoder@example.com", "--credits", "2"], { cwd: workDir });
    const key = lastLine((await runAtelier(binary, ["key", "create", "decoder@example.com"], { cwd: workDir })).stdout);
    const generate = (reference_images: string[]) =>
      fetch(`${server.url}/v1/images/generations`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ prompt: "a harbour", size: "64x64", reference_images }),
      });
    const pixels = new Uint8ClampedArray(32 * 32 * 4).fill(180);
    const webp = new Uint8Array(await encodeWebp({ data: pixels, width: 32, height: 32, colorSpace: "srgb" } as ImageData, { lossless: 1 }));
    const ok = await generate([dataUrl(makePng(40, 30)), dataUrl(webp, "webp")]);
    expect(ok.status).toBe(200);
    const bomb = await generate([dataUrl(interlacedZerosBomb())]);
    expect(bomb.status).toBe(400);
    const { error } = (await bomb.json()) as { error: { param: string; message: string } };
    expect(error.param).toBe("reference_images[0]");
    expect(error.message).toContain("inflates to more than the 16504 bytes its header allows");
  });

  test("checkpoints its WAL on a worker thread (a third entrypoint): a row it wrote reaches the database file by itself", async () => {
    await runAtelier(binary, ["user", "add", "wal@example.com"], { cwd: workDir });
    const key = lastLine((await runAtelier(binary, ["key", "create", "wal@example.com"], { cwd: workDir })).stdout);
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "builtin-chat", messages: [{ role: "user", content: "hello" }] }),
    });
    expect(res.status).toBe(200);
    const id = res.headers.get("x-request-id")!;
    // The serving connection no longer checkpoints (a few rows would stay in the -wal file for
    // a long time): only the worker puts this row into a copy of atelier.db taken without its WAL.
    const inFileAlone = () => {
      const copy = join(binDir, "alone.db");
      copyFileSync(join(workDir, "data", "atelier.db"), copy);
      const db = new Database(copy, { readonly: true });
      try {
        // Before any checkpoint even the schema is only in the WAL.
        const tables = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'requests'").get()!.n;
        return tables === 1 && db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM requests WHERE id = ?").get(id)!.n === 1;
      } finally {
        db.close();
        rmSync(copy);
      }
    };
    let found = false;
    for (let i = 0; i < 60 && !found; i++) {
      await Bun.sleep(100);
      found = inFileAlone();
    }
    expect(found).toBe(true);
    expect(server.lines.filter((l) => l.includes("checkpoint"))).toEqual([]);
  });

  test("its healthcheck command passes, and SIGTERM stops it with exit 0", async () => {
    const health = await runAtelier(binary, ["healthcheck", "--url", server.url], { cwd: workDir });
    expect(health.code).toBe(0);
    expect(await server.stop()).toBe(0);
    expect(server.lines.some((l) => l.includes('"stopped"'))).toBe(true);
  });
});
