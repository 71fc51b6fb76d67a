import { type Config, loadConfig } from "../../config.ts";

/** Config for tests: defaults plus overrides, with an in-memory KV and private targets allowed. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  return {
    ...loadConfig({
      KV_PATH: ":memory:",
      ALLOW_PRIVATE_DESTINATIONS: "true",
      LOG_LEVEL: "silent",
      PUBLIC_URL: "http://127.0.0.1:8000",
    }),
    ...overrides,
  };
}

/** An SMTP destination config with its own relay (variant A), for admin tests. */
export const SMTP_RELAY_CONFIG = {
  host: "smtp.example.com",
  port: 587,
  username: "mailer",
  password: "hunter2-secret",
  from: "forms@example.com",
  to: ["owner@example.com"],
};
