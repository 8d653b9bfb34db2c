/**
 * Preloaded before every test file (bunfig.toml [test] preload). Real servers, real clients,
 * a compiled binary and a real browser need more than bun's default 5 s per test on a slow
 * machine; bunfig.toml has no timeout key, so it is set here.
 */
import { setDefaultTimeout } from "bun:test";

setDefaultTimeout(60_000);
