/**
 * scripts/backend-tests.ts, which picks the files the suite's scaled pass runs: a file runs on
 * that pass when its imports reach test/support/backend.ts, directly or through other modules,
 * and that module must stay the only reader of ATELIER_TEST_BACKEND, or a file the pass skips
 * could behave differently on it.
 */
import { expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Glob } from "bun";
import { testFilesReaching } from "../scripts/backend-tests";
import { tempDir } from "./support/tempDirs";

const root = join(import.meta.dir, "..");

test("a test file is picked when its imports reach the module, through other modules and cycles; the others are not", () => {
  const dir = tempDir();
  mkdirSync(join(dir, "test/support"), { recursive: true });
  mkdirSync(join(dir, "test/deep"), { recursive: true });
  const files: Record<string, string> = {
    "test/support/backend.ts": `export const scaled = process.env.X === "scaled";`,
    "test/support/server.ts": `import { scaled } from "./backend";\nexport const s = scaled;`,
    "test/support/cycleA.ts": `import { b } from "./cycleB";\nexport const a = 1;`,
    "test/support/cycleB.ts": `import { a } from "./cycleA.ts";\nimport { s } from "./server";\nexport const b = 2;`,
    "test/direct.test.ts": `import { scaled } from "./support/backend";`,
    "test/deep/viaServer.test.ts": `#!/usr/bin/env bun\nimport { s } from "../support/server";`,
    "test/deep/viaCycle.test.ts": `import type { T } from "bun:test";\nimport { b } from "../support/cycleB";`,
    "test/deep/viaOtherEnd.test.ts": `import { a } from "../support/cycleA";`,
    "test/typeOnly.test.ts": `import type { s } from "./support/server";`,
    "test/pure.test.ts": `import { expect } from "bun:test";\nimport { join } from "node:path";\nconst backend = "not an import";`,
    "test/reExport.test.ts": `export * from "./support/server";`,
  };
  for (const [path, source] of Object.entries(files)) writeFileSync(join(dir, path), source);
  expect(testFilesReaching(join(dir, "test/support/backend.ts"), dir)).toEqual([
    "test/deep/viaCycle.test.ts",
    "test/deep/viaOtherEnd.test.ts",
    "test/deep/viaServer.test.ts",
    "test/direct.test.ts",
    "test/reExport.test.ts",
  ]);
});

test("in this repository: servers' tests are picked, unit tests are not, and only test/support/backend.ts reads the backend variable", () => {
  const picked = testFilesReaching(join(root, "test/support/backend.ts"));
  expect(picked).toContain("test/e2e/images.test.ts");
  expect(picked).toContain("test/e2e/workbench.test.ts");
  expect(picked).not.toContain("test/core/ids.test.ts");
  expect(picked).not.toContain("test/store/usageOnBothEngines.test.ts");
  const readers = [...new Glob("{src,test,scripts}/**/*.ts").scanSync(root)].filter(
    (f) => f !== "scripts/backend-tests.ts" && f !== "test/backendTests.test.ts" && readFileSync(join(root, f), "utf8").includes("ATELIER_TEST_BACKEND"),
  );
  expect(readers).toEqual(["test/support/backend.ts"]);
});
