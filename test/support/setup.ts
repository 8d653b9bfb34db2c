/**
 * Preloaded before every test file (bunfig.toml [test] preload). Real servers, real clients,
 * a compiled binary and a real browser need more than bun's default 5 s per test on a slow
 * machine; bunfig.toml has no timeout key, so it is set here. In Bun 1.4.5 this reaches only
 * the FIRST file of a run (every later file is back at 5 s), so a run of several files needs
 * `bun test --timeout 60000`, as `test:all` does.
 */
import { afterAll, setDefaultTimeout } from "bun:test";
import { removeTempDirs } from "./tempDirs";

setDefaultTimeout(60_000);

// Once, after every file of the run (a preload's afterAll, unlike its timeout, covers the whole run).
afterAll(removeTempDirs);
