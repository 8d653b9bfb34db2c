/**
 * Workers that are entrypoints of the compiled binary of their own (package.json "build" lists
 * each). From source a worker file sits below src/, like this module's parent. In the binary
 * every module's import.meta.url is the executable's own, and entrypoints are embedded by their
 * path below the entrypoints' common directory, which is src/: hence the second URL
 * (test/e2e/binary.test.ts runs both workers through it).
 */

/** Bun's Worker (the DOM type lacks ref/unref, which decide whether it keeps the process alive). */
export type BunWorker = Worker & { ref(): void; unref(): void };

/** Starts the worker whose module is `pathBelowSrc` (e.g. "store/checkpointWorker.ts"). */
export function spawnEntrypointWorker(pathBelowSrc: string): BunWorker {
  const fromSource = import.meta.path.endsWith("entrypointWorker.ts");
  const url = fromSource ? new URL(`../${pathBelowSrc}`, import.meta.url) : new URL(`./${pathBelowSrc}`, import.meta.url);
  return new Worker(url.href) as BunWorker;
}
