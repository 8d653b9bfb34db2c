/**
 * The test files whose behaviour depends on the suite's backend, one per line: those whose
 * imports reach test/support/backend.ts, the only module that reads ATELIER_TEST_BACKEND.
 * The scaled pass of `bun run test:all` runs these alone: every other file (unit tests, the
 * `*OnBothEngines` tests that start PostgreSQL and Redis themselves, the multi-instance test
 * that spawns its own servers) does exactly the same on both passes, and running it twice
 * cost the scaled pass about 2.5 of its 9 minutes.
 *
 *   bun scripts/backend-tests.ts
 *
 * Exits non-zero when it finds none (the pass would then run nothing, or everything).
 */
import { Glob } from "bun";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");
const BACKEND_MODULE = join(ROOT, "test/support/backend.ts");

/** The test files (relative to the repository, sorted) that import `target`, directly or through other local modules. */
export function testFilesReaching(target: string, root = ROOT): string[] {
  const transpiler = new Bun.Transpiler({ loader: "ts" });
  const tests = [...new Glob("test/**/*.test.ts").scanSync(root)].map((f) => join(root, f));
  // Every local module the tests load, with the modules that import it.
  const importers = new Map<string, string[]>();
  const seen = new Set<string>(tests);
  const queue = [...tests];
  for (let file = queue.pop(); file !== undefined; file = queue.pop()) {
    // scanImports takes TypeScript, not a shebang line; type-only imports load nothing and are not listed.
    for (const { path: spec } of transpiler.scanImports(readFileSync(file, "utf8").replace(/^#!.*/, ""))) {
      const local = localModule(file, spec);
      if (local === null) continue;
      importers.set(local, [...(importers.get(local) ?? []), file]);
      if (!seen.has(local)) {
        seen.add(local);
        queue.push(local);
      }
    }
  }
  // Walked back from the target: everything that reaches it (import cycles included).
  const reaching = new Set<string>([target]);
  const back = [target];
  for (let file = back.pop(); file !== undefined; file = back.pop()) {
    for (const importer of importers.get(file) ?? []) {
      if (!reaching.has(importer)) {
        reaching.add(importer);
        back.push(importer);
      }
    }
  }
  return tests.filter((f) => reaching.has(f)).map((f) => relative(root, f)).sort();
}

/** The file a relative import names (`./x`, `../y/z.ts`), else null (a package, `bun:*`, `node:*`). */
function localModule(from: string, spec: string): string | null {
  if (!spec.startsWith(".")) return null;
  const base = resolve(dirname(from), spec);
  for (const candidate of [base, `${base}.ts`, `${base}.tsx`, join(base, "index.ts")]) {
    if (/\.tsx?$/.test(candidate) && existsSync(candidate)) return candidate;
  }
  return null;
}

if (import.meta.main) {
  const files = testFilesReaching(BACKEND_MODULE);
  if (files.length === 0) {
    console.error("scripts/backend-tests.ts: no test file reaches test/support/backend.ts");
    process.exit(1);
  }
  // `./` makes bun test take each as a path, not a name filter.
  console.log(files.map((f) => `./${f}`).join("\n"));
}
