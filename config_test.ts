import assert from "node:assert/strict";
import {
  ASSUMED_DESCRIPTOR_LIMIT,
  ConfigError,
  DEFAULT_DELIVERY_CONCURRENCY,
  deliveryConcurrencyFor,
  descriptorLimit,
  loadConfig,
  PACE_INITIAL,
} from "./config.ts";

Deno.test("loadConfig applies the contract's defaults", () => {
  const config = loadConfig({});
  assert.equal(config.port, 8000);
  assert.equal(config.kvPath, "data/formrelay.kv");
  assert.equal(config.ingestContentTypes, "any");
  assert.equal(config.captchaVerifyUrl, "https://api.hcaptcha.com/siteverify");
  assert.equal(config.clientIpHeader, null, "the connection's address unless a proxy is named");
  assert.equal(config.trustedProxyHops, 1);
  assert.deepEqual(config.http, {
    headersTimeoutMs: 10_000,
    keepAliveTimeoutMs: 5_000,
    bodyTimeoutMs: 10_000,
    bodyGraceMs: 2_000,
    bodyMinBytesPerSecond: 500,
    maxConnections: null,
    bodyMemoryBytes: 8 * 1024 * 1024,
    bodyClientBytes: 4 * 131_072,
  });
  assert.equal(config.platformSmtp, null);
  assert.equal(config.allowPrivateDestinations, false);
  assert.equal(
    config.deliveryConcurrency,
    deliveryConcurrencyFor(descriptorLimit() ?? ASSUMED_DESCRIPTOR_LIMIT),
    "many in flight, within a fifth of the descriptor limit",
  );
  assert.equal(deliveryConcurrencyFor(20_000), DEFAULT_DELIVERY_CONCURRENCY);
  assert.equal(
    deliveryConcurrencyFor(1024),
    204,
    "with the listener's three quarters, under 1 024 descriptors",
  );
  assert.equal(deliveryConcurrencyFor(ASSUMED_DESCRIPTOR_LIMIT), 819, "where it cannot be read");
  assert.deepEqual(config.pace, { initial: PACE_INITIAL, max: 128 });
  assert.equal(config.deliveryOrgShare, 0.5);
  assert.deepEqual(
    config.retryScheduleMs,
    [5, 300, 1800, 7200, 18000, 36000, 36000].map((s) => s * 1000),
  );
  assert.equal(config.httpTimeoutMs, 15_000);
  assert.equal(config.smtpTimeoutMs, 60_000);
  assert.equal(config.pauseAfterMs, 24 * 3600 * 1000, "a day of failing pauses a destination");
  assert.equal(config.failedRetentionMs, 0, "failed submissions are not kept");
});

Deno.test("DESTINATION_PAUSE_AFTER_HOURS and FAILED_RETENTION_HOURS take hours, 0 turning them off", () => {
  const config = loadConfig({ DESTINATION_PAUSE_AFTER_HOURS: "0.5", FAILED_RETENTION_HOURS: "72" });
  assert.equal(config.pauseAfterMs, 1800_000);
  assert.equal(config.failedRetentionMs, 72 * 3600_000);
  assert.equal(loadConfig({ DESTINATION_PAUSE_AFTER_HOURS: "0" }).pauseAfterMs, 0);
});

Deno.test("loadConfig takes KV_PATH as a file, :memory: or a KV Connect URL", () => {
  assert.equal(loadConfig({ KV_PATH: ":memory:" }).kvPath, ":memory:");
  assert.equal(loadConfig({ KV_PATH: "/tmp/x.kv" }).kvPath, "/tmp/x.kv");
  assert.equal(
    loadConfig({ KV_PATH: "https://kv.example.com/db" }).kvPath,
    "https://kv.example.com/db",
  );
  assert.equal(loadConfig({ DENO_DEPLOYMENT_ID: "abc" }).kvPath, undefined);
});

Deno.test("DELIVERY_ORG_SHARE takes a share of the slots above 0 and up to 1", () => {
  assert.equal(loadConfig({ DELIVERY_ORG_SHARE: "0.25" }).deliveryOrgShare, 0.25);
  assert.equal(loadConfig({ DELIVERY_ORG_SHARE: "1" }).deliveryOrgShare, 1);
});

Deno.test("an empty CLIENT_IP_HEADER disables the header", () => {
  assert.equal(loadConfig({ CLIENT_IP_HEADER: "" }).clientIpHeader, null);
  assert.equal(loadConfig({ CLIENT_IP_HEADER: "X-Real-IP" }).clientIpHeader, "x-real-ip");
});

Deno.test("an invalid value stops start-up with one line naming the variable", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ PORT: "eighty" }, /^Invalid PORT: /],
    [{ PORT: "70000" }, /^Invalid PORT: /],
    [{ INGEST_CONTENT_TYPES: "xml" }, /^Invalid INGEST_CONTENT_TYPES: /],
    [{ ALLOW_PRIVATE_DESTINATIONS: "yes" }, /^Invalid ALLOW_PRIVATE_DESTINATIONS: /],
    [{ SUBMISSION_ENCRYPTION_KEY: "c2hvcnQ=" }, /^Invalid SUBMISSION_ENCRYPTION_KEY: /],
    [{ CAPTCHA_VERIFY_URL: "not a url" }, /^Invalid CAPTCHA_VERIFY_URL: /],
    [{ PLATFORM_SMTP_HOST: "smtp.example.com" }, /^Invalid PLATFORM_SMTP_PORT: required/],
    [{ PLATFORM_SMTP_SECURE_TRANSPORT: "tls" }, /^Invalid PLATFORM_SMTP_SECURE_TRANSPORT: /],
    [{ DELIVERY_ORG_SHARE: "0" }, /^Invalid DELIVERY_ORG_SHARE: /],
    [{ DELIVERY_ORG_SHARE: "1.5" }, /^Invalid DELIVERY_ORG_SHARE: /],
    [{ DELIVERY_ORG_SHARE: "half" }, /^Invalid DELIVERY_ORG_SHARE: /],
    [{ DESTINATION_PAUSE_AFTER_HOURS: "-1" }, /^Invalid DESTINATION_PAUSE_AFTER_HOURS: /],
    [{ FAILED_RETENTION_HOURS: "day" }, /^Invalid FAILED_RETENTION_HOURS: /],
    [{ FAILED_RETENTION_HOURS: "721" }, /^Invalid FAILED_RETENTION_HOURS: /],
  ];
  for (const [env, message] of cases) {
    assert.throws(() => loadConfig(env), (error: Error) => {
      assert.ok(error instanceof ConfigError);
      assert.match(error.message, message);
      assert.ok(!error.message.includes("\n"));
      return true;
    });
  }
});

Deno.test("PLATFORM_SMTP_* configure the platform relay", () => {
  const config = loadConfig({
    PLATFORM_SMTP_HOST: "smtp.example.com",
    PLATFORM_SMTP_PORT: "465",
    PLATFORM_SMTP_SECURE_TRANSPORT: "on",
    PLATFORM_SMTP_USERNAME: "u",
    PLATFORM_SMTP_PASSWORD: "p",
    PLATFORM_SMTP_FROM_EMAIL: "forms@example.com",
  });
  assert.deepEqual(config.platformSmtp, {
    host: "smtp.example.com",
    port: 465,
    secureTransport: "on",
    username: "u",
    password: "p",
    fromEmail: "forms@example.com",
  });
});

Deno.test("main.ts refuses to start on an invalid variable with one clear line", async () => {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./main.ts", import.meta.url).pathname],
    env: { PORT: "nope", KV_PATH: ":memory:" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(output.code, 1);
  const stderr = new TextDecoder().decode(output.stderr).trim();
  assert.match(stderr, /^formrelay: Invalid PORT: /);
  assert.equal(stderr.split("\n").length, 1);
});

Deno.test("loadConfig reads the metrics and readiness settings", () => {
  const defaults = loadConfig({});
  assert.deepEqual(defaults.metrics, { token: null, perForm: false });
  assert.equal(defaults.readyMaxBacklog, 10_000);
  const set = loadConfig({
    METRICS_TOKEN: "a-long-enough-token",
    METRICS_PER_FORM: "true",
    READY_MAX_BACKLOG: "50",
  });
  assert.deepEqual(set.metrics, { token: "a-long-enough-token", perForm: true });
  assert.equal(set.readyMaxBacklog, 50);
  assert.throws(() => loadConfig({ METRICS_TOKEN: "short" }), ConfigError);
  assert.throws(() => loadConfig({ READY_MAX_BACKLOG: "0" }), ConfigError);
});

Deno.test("DELIVERY_CONCURRENCY and DESTINATION_MAX_CONCURRENCY are taken as given", () => {
  const config = loadConfig({ DELIVERY_CONCURRENCY: "4000", DESTINATION_MAX_CONCURRENCY: "16" });
  assert.equal(config.deliveryConcurrency, 4000);
  assert.equal(config.pace.max, 16);
  assert.throws(() => loadConfig({ DESTINATION_MAX_CONCURRENCY: "0" }), ConfigError);
});
