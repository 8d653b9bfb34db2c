/**
 * What this build is: the package version and the commit it was built from. `bun run build`
 * bakes the commit in with `--define ATELIER_BUILD_COMMIT=…` (from `ATELIER_COMMIT` or git); run
 * from source, it is read from git once, when first asked for, and "unknown" without git.
 */
import pkg from "../package.json" with { type: "json" };

declare const ATELIER_BUILD_COMMIT: string | undefined;

export const VERSION: string = pkg.version;

let commit: string | undefined;

export function buildCommit(): string {
  if (commit !== undefined) return commit;
  // typeof: without --define the identifier is not declared anywhere, and reading it would throw.
  if (typeof ATELIER_BUILD_COMMIT === "string" && ATELIER_BUILD_COMMIT !== "") return (commit = ATELIER_BUILD_COMMIT);
  try {
    const git = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: import.meta.dir, stdout: "pipe", stderr: "ignore" });
    const out = git.exitCode === 0 ? git.stdout.toString().trim() : "";
    commit = /^[0-9a-f]{4,40}$/.test(out) ? out : "unknown";
  } catch {
    commit = "unknown";
  }
  return commit;
}

/** `atelier 0.1.0 (abc1234)` — what `atelier --version` prints. */
export function versionLine(): string {
  return `atelier ${VERSION} (${buildCommit()})`;
}
