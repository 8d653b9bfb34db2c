/**
 * The key that seals webhook signing secrets, as operators meet it (core/webhooksKeyCheck):
 * servers on one database (one data_dir: one SQLite file on the embedded pass, one PostgreSQL
 * database on the scaled one) whose `[webhooks] secret_key` differs, and a data directory that
 * lost its webhook-secrets.key. A server whose key cannot open the stored secrets refuses to
 * start and says what to do; `atelier webhooks forget-secrets --yes` is the way out when the
 * key is lost for good.
 */
import { afterAll, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ATELIER_FROM_SOURCE, runAtelier } from "../support/process";
import { startTestServer, type TestServer } from "../support/server";
import { tempDir } from "../support/tempDirs";

const running: TestServer[] = [];
afterAll(async () => {
  for (const s of running.reverse()) await s.close();
});

const keyX = randomBytes(32).toString("base64");
const keyY = randomBytes(32).toString("base64");

async function serverOn(dir: string, secretKey?: string): Promise<TestServer> {
  const s = await startTestServer({
    config: (c) => {
      c.server.data_dir = dir;
      c.server.log_requests = false;
      if (secretKey !== undefined) c.webhooks.secret_key = secretKey;
    },
  });
  running.push(s);
  return s;
}

test("instances given different [webhooks] secret_key: the second refuses to start once a secret is sealed; forget-secrets lets it", async () => {
  const dir = tempDir("atelier-webhook-key-");
  const a = await serverOn(dir, keyX);
  const { userId } = await a.userWithKey();
  const hooks = a.services.taskEvents.endpoints;
  await hooks.rotateSecret(userId);
  await expect(serverOn(dir, keyY)).rejects.toThrow(/not the one this database's webhook signing secrets were sealed with.*same \[webhooks\] secret_key/);
  // The same key starts, as a second instance of the deployment should.
  const same = await serverOn(dir, keyX);
  expect(await same.services.taskEvents.endpoints.secretsOf(userId)).toHaveLength(1);

  const cli = (...args: string[]) => runAtelier(ATELIER_FROM_SOURCE, ["webhooks", ...args, ...a.cliArgs], { env: a.childEnv });
  const unconfirmed = await cli("forget-secrets");
  expect(unconfirmed.code).not.toBe(0);
  expect(unconfirmed.stderr).toContain("--yes");
  expect(await hooks.hasSecret(userId)).toBe(true);
  // Refused while servers run on the database: they hold the old key and would go on with it.
  const whileRunning = await cli("forget-secrets", "--yes");
  expect(whileRunning.code).not.toBe(0);
  expect(whileRunning.stderr).toMatch(/2 servers are running on this database .*stop them first, or add --force/);
  expect(await hooks.hasSecret(userId)).toBe(true);
  // Stopped (their heartbeat still within its lease): --force says they are gone.
  await a.stop();
  await same.stop();
  const forgot = await cli("forget-secrets", "--yes", "--force");
  expect(forgot).toMatchObject({ code: 0, stderr: "" });
  expect(forgot.stdout).toContain("forgot the signing secrets of 1 webhook endpoint;");

  const b = await serverOn(dir, keyY);
  expect(await b.services.taskEvents.endpoints.hasSecret(userId)).toBe(false);
  const secret = await b.services.taskEvents.endpoints.rotateSecret(userId);
  expect(await b.services.taskEvents.endpoints.secretsOf(userId)).toEqual([secret]);
});

test("a data directory that lost its webhook-secrets.key: a server on it refuses to start, and says so", async () => {
  const dir = tempDir("atelier-webhook-keyfile-");
  const a = await serverOn(dir);
  const { userId } = await a.userWithKey();
  await a.services.taskEvents.endpoints.rotateSecret(userId);
  const keyFile = join(dir, "webhook-secrets.key");
  expect(existsSync(keyFile)).toBe(true);
  rmSync(keyFile);
  await expect(serverOn(dir)).rejects.toThrow(/webhook-secrets\.key is missing, and this database holds webhook signing secrets sealed with it: put it back.*forget-secrets --yes/);
  // No key was made in its place: the file to put back is still the one missing.
  expect(existsSync(keyFile)).toBe(false);
});
