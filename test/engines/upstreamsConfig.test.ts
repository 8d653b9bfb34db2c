/** The [[upstreams]] keys this area added: defaults, and the cross-field rule for WebUI chat models. */
import { describe, expect, test } from "bun:test";
import { ConfigError } from "../../src/config";
import { configFromToml } from "../support/server";

const UPSTREAM = `
[[upstreams]]
id = "sd"
kind = "sdwebui"
base_url = "http://127.0.0.1:7860"
accounts = [ { id = "gpu" } ]
`;

describe("[[upstreams]] configuration", () => {
  test("defaults of the pool keys", () => {
    const u = configFromToml(UPSTREAM).upstreams[0]!;
    expect(u).toMatchObject({
      timeout_ms: 120_000,
      max_attempts: 3,
      rate_limit_cooldown_max_ms: 60_000,
      failure_threshold: 3,
      failure_cooldown_ms: 5_000,
      failure_cooldown_max_ms: 300_000,
      max_download_bytes: 64 * 1024 * 1024,
      download_timeout_ms: 30_000,
    });
    expect(u.deadline_ms).toBeUndefined();
    expect(u.accounts[0]).toMatchObject({ id: "gpu", weight: 1, max_concurrency: 2 });
  });

  test("a chat model on a WebUI upstream is refused at startup with the key at fault", () => {
    let error: unknown;
    try {
      configFromToml(`${UPSTREAM}\n[[models]]\nid = "talk"\nkind = "chat"\nupstream = "sd"\n`);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toContain("models[0].kind: upstream \"sd\" is a Stable Diffusion WebUI, which serves image models only");
  });

  test("an unknown upstream key is refused", () => {
    expect(() => configFromToml(UPSTREAM.replace('kind = "sdwebui"', 'kind = "sdwebui"\ncooldown = 5'))).toThrow("unknown key");
  });
});
