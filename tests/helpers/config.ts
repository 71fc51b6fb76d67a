import { type Config, loadConfig } from "../../config.ts";

/** Config for tests: defaults plus overrides, with an in-memory KV and private targets allowed. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  return {
    ...loadConfig({ KV_PATH: ":memory:", ALLOW_PRIVATE_DESTINATIONS: "true", LOG_LEVEL: "silent" }),
    ...overrides,
  };
}
