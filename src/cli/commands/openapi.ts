/** `atelier openapi`: the API document, for the repository's openapi/openapi.json and for client generators. */
import { renameSync, writeFileSync } from "node:fs";
import { createApp } from "../../app";
import { createServices } from "../../services";
import type { Config } from "../../config";
import { silentLogger } from "../../logger";
import { createStore } from "../../store";
import { latestVersion, openDatabase } from "../../store/database";
import { COMMON_HELP, noPositionals, parseCommand } from "../args";
import { configWithoutUpstreamSecrets, type Io } from "../shared";

const USAGE = `Usage: atelier openapi [--output FILE]

Prints the OpenAPI document (the same one served at /openapi.json).

  --output FILE   write it to FILE instead of stdout (replaced only once complete)

${COMMON_HELP}`;

/**
 * The document the server serves at /openapi.json, asked of the app itself without listening, so
 * the two cannot differ. An in-memory database: printing it never touches the data directory.
 */
export async function renderOpenApi(config: Config): Promise<string> {
  const store = createStore(openDatabase(":memory:"), latestVersion());
  try {
    const app = createApp(createServices({ config, store, logger: silentLogger }));
    const res = await app.handle(new Request("http://localhost/openapi.json"));
    return JSON.stringify(await res.json(), null, 2);
  } finally {
    await store.close();
  }
}

export async function openapiCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommand(argv, { output: { type: "string" } }, USAGE);
  if (values.help) return io.out(USAGE), 0;
  noPositionals("openapi", positionals, USAGE);
  const document = await renderOpenApi(configWithoutUpstreamSecrets(values));
  if (values.output === undefined) return io.out(document), 0;
  // Written beside the target, then renamed over it: a reader never sees half a document.
  writeFileSync(`${values.output}.tmp`, `${document}\n`);
  renameSync(`${values.output}.tmp`, values.output);
  return 0;
}
