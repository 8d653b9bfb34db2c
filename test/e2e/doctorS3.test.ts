/**
 * `atelier doctor` with [storage] kind = "s3": an "image storage" row that passes when the
 * bucket (the fake S3 server, which verifies signatures) answers with the configured
 * credentials, and fails, exit 1, when it refuses them or is gone, never showing the secret.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startFakeS3, type FakeS3 } from "../support/fakeS3";
import { ATELIER_FROM_SOURCE, runAtelier } from "../support/process";
import { tempDir } from "../support/tempDirs";

let s3: FakeS3;
let dataDir: string;
let config: string;

beforeAll(async () => {
  s3 = await startFakeS3();
  dataDir = tempDir("atelier-doctor-s3-");
  config = join(dataDir, "atelier.toml");
  writeFileSync(
    config,
    `[storage]\nkind = "s3"\nbucket = "${s3.bucket}"\nendpoint = "\${S3_ENDPOINT}"\naccess_key_id = "\${S3_KEY_ID}"\nsecret_access_key = "\${S3_SECRET}"\nprefix = "atelier/"\n`,
  );
  expect((await runAtelier(ATELIER_FROM_SOURCE, ["user", "add", "ann@example.com", "--credits", "5", "--data", dataDir])).code).toBe(0);
});
afterAll(async () => {
  await s3.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

const doctor = (secret: string, endpoint = s3.url) =>
  runAtelier(ATELIER_FROM_SOURCE, ["doctor", "--config", config, "--data", dataDir, "--timeout-ms", "2000"], {
    env: { S3_ENDPOINT: endpoint, S3_KEY_ID: s3.accessKeyId, S3_SECRET: secret },
  });
const row = (stdout: string) => stdout.split("\n").find((l) => l.startsWith("image storage ")) ?? "";

test("the bucket answers and takes the credentials: ok, exit 0, the secret never shown", async () => {
  const r = await doctor(s3.secretAccessKey);
  expect(row(r.stdout)).toMatch(/^image storage\s+ok\s+s3:\/\/atelier-images\/atelier\/ at 127\.0\.0\.1:\d+: reachable, credentials accepted$/);
  expect(r.code).toBe(0);
  expect(r.stdout + r.stderr).not.toContain(s3.secretAccessKey);
  expect(s3.requests.some((q) => q.method === "GET" && q.path.includes("list-type=2") && q.status === 200)).toBe(true);
});

test("a wrong secret: the bucket answers 403 SignatureDoesNotMatch, the row fails, exit 1, neither secret shown", async () => {
  const wrong = "doctor-wrong-secret-9876543210";
  const r = await doctor(wrong);
  expect(row(r.stdout)).toMatch(/^image storage\s+fail\s+.*SignatureDoesNotMatch/);
  expect(r.code).toBe(1);
  expect(r.stdout + r.stderr).not.toContain(wrong);
  expect(r.stdout + r.stderr).not.toContain(s3.secretAccessKey);
});

test("no bucket there: the row fails, exit 1", async () => {
  const gone = await startFakeS3();
  await gone.stop();
  const r = await doctor(s3.secretAccessKey, gone.url);
  expect(row(r.stdout)).toMatch(/^image storage\s+fail\s+/);
  expect(r.code).toBe(1);
});
