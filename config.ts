/**
 * Every environment variable the service reads, parsed once with zod: `envSchema` checks
 * each variable (its default included), `configSchema` turns them into the grouped
 * configuration, and the {@linkcode Config} type is that schema's output, so the type
 * cannot drift from what parsing returns.
 *
 * @module
 */
import { z } from "zod";

const boolean = z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1");
const positiveInt = z.coerce.number().int().positive();
const nonNegativeInt = z.coerce.number().int().min(0);
const secureTransport = z.enum(["off", "starttls", "on"]);

/** Every environment variable the service reads, with its default. */
const envSchema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8000),
  KV_PATH: z.string().min(1).optional(),
  INGEST_CONTENT_TYPES: z.enum(["any", "json"]).default("any"),
  CAPTCHA_VERIFY_URL: z.url({ protocol: /^https?$/ }).default(
    "https://api.hcaptcha.com/siteverify",
  ),
  /** Opt-in: the header a trusted proxy or CDN puts the client's address in. */
  CLIENT_IP_HEADER: z.string().default(""),
  /** Proxies of this deployment that append to X-Forwarded-For (counted from the right). */
  TRUSTED_PROXY_HOPS: z.coerce.number().int().min(1).max(10).default(1),
  HTTP_HEADERS_TIMEOUT_MS: positiveInt.default(10_000),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: positiveInt.default(5_000),
  HTTP_BODY_TIMEOUT_MS: positiveInt.default(10_000),
  /** From this long after a body's read began, it must average HTTP_BODY_MIN_RATE. */
  HTTP_BODY_GRACE_MS: positiveInt.default(2_000),
  /** Bytes a second a body must average once its grace has passed; 0: no minimum. */
  HTTP_BODY_MIN_RATE: z.coerce.number().int().min(0).default(500),
  /** Open connections at most; unset: three quarters of the descriptor limit, at most 10 000. */
  HTTP_MAX_CONNECTIONS: positiveInt.optional(),
  /** Declared bytes of request bodies being read and processed at once. */
  HTTP_BODY_MEMORY_BYTES: positiveInt.min(262_144).default(8 * 1024 * 1024),
  /** Declared bytes of bodies one client address (an IPv6 /64) may hold in that budget. */
  HTTP_BODY_CLIENT_BYTES: positiveInt.min(131_072).default(4 * 131_072),
  PLATFORM_SMTP_HOST: z.string().min(1).optional(),
  PLATFORM_SMTP_PORT: z.coerce.number().int().min(1).max(65535).optional(),
  PLATFORM_SMTP_SECURE_TRANSPORT: secureTransport.default("starttls"),
  PLATFORM_SMTP_USERNAME: z.string().min(1).optional(),
  PLATFORM_SMTP_PASSWORD: z.string().min(1).optional(),
  PLATFORM_SMTP_FROM_EMAIL: z.email().optional(),
  /** Most recipients of one Variant B (platform relay) destination. */
  PLATFORM_SMTP_MAX_RECIPIENTS: positiveInt.max(1000).default(5),
  /** Platform relay recipients per organization per minute (test sends included); 0: no limit. */
  PLATFORM_SMTP_ORG_PER_MINUTE: nonNegativeInt.default(30),
  /** Platform relay recipients per organization per UTC day (test sends included); 0: no limit. */
  PLATFORM_SMTP_ORG_PER_DAY: nonNegativeInt.default(1000),
  SMTP_HELO_NAME: z.string().regex(/^[A-Za-z0-9.-]+$/, "Expected a host name").default(
    "localhost",
  ),
  ALLOW_PRIVATE_DESTINATIONS: boolean.default(false),
  SUBMISSION_ENCRYPTION_KEY: z.string().refine(
    (v) => decodesTo32Bytes(v),
    "Expected 32 bytes in base64",
  ).optional(),
  /** Earlier sealing keys that still open values (comma-separated, base64); they never seal. */
  SUBMISSION_ENCRYPTION_KEYS_PREVIOUS: z.string().transform((v) =>
    v.split(",").map((key) => key.trim()).filter((key) => key !== "")
  ).refine(
    (keys) => keys.every(decodesTo32Bytes),
    "Expected comma-separated keys of 32 bytes in base64",
  ).optional(),
  /** Deliveries in flight at most per process; unset: DEFAULT_DELIVERY_CONCURRENCY within the descriptor limit. */
  DELIVERY_CONCURRENCY: positiveInt.max(10_000).optional(),
  /** Deliveries in flight to one destination at most, however fast it answers. */
  DESTINATION_MAX_CONCURRENCY: positiveInt.max(10_000).default(128),
  /** Share of the delivery slots one organization may hold (0 < share <= 1). */
  DELIVERY_ORG_SHARE: z.coerce.number().gt(0).max(1).default(0.5),
  /** Delivery jobs due at most in one process (waiting or in progress); past it, 503. */
  BACKLOG_MAX_JOBS: positiveInt.default(20_000),
  /** Share of BACKLOG_MAX_JOBS one organization may fill (0 < share <= 1). */
  BACKLOG_ORG_SHARE: z.coerce.number().gt(0).max(1).default(0.5),
  /**
   * The address browsers reach the service at (`https://forms.example.com`): the base of the
   * links in its own emails (the console's page a notice tells of, an address's confirmation).
   */
  PUBLIC_URL: z.url({ protocol: /^https?$/ }).optional(),
  /** Whether a KV that offers queues carries wake-ups through them (false: the sweep alone, as on Deploy). */
  KV_QUEUES: boolean.default(true),
  /** Seconds between sweeps for due jobs and expired leases. */
  SWEEP_INTERVAL_SECONDS: z.coerce.number().positive().default(15),
  /** Milliseconds a claimed job is held before another worker may take it over. */
  DELIVERY_LEASE_MS: positiveInt.default(120_000),
  /** Comma-separated retry delays in seconds; the contract's schedule by default. */
  RETRY_SCHEDULE_SECONDS: z.string().regex(/^\d+(\.\d+)?(,\d+(\.\d+)?)*$/).default(
    "5,300,1800,7200,18000,36000,36000",
  ),
  TELEGRAM_API_URL: z.url({ protocol: /^https?$/ }).default("https://api.telegram.org"),
  HTTP_TIMEOUT_MS: positiveInt.default(15_000),
  SMTP_TIMEOUT_MS: positiveInt.default(60_000),
  /** Accepted submissions per form and client IP per window; 0 turns the limit off. */
  RATE_LIMIT_MAX: z.coerce.number().int().min(0).default(60),
  RATE_LIMIT_WINDOW_SECONDS: positiveInt.default(600),
  /** Hours of failing (destination's fault, no delivery in between) before pausing; 0 never. */
  DESTINATION_PAUSE_AFTER_HOURS: z.coerce.number().min(0).default(24),
  /** Owner notifications: consecutive failed attempts before "destination failing" is told. */
  NOTIFY_FAILING_AFTER_ATTEMPTS: positiveInt.default(3),
  /** Owner notifications: at most one message per event and destination per this many minutes. */
  NOTIFY_GROUP_MINUTES: z.coerce.number().min(1).max(24 * 60).default(60),
  /** Owner notifications: the summary an organization gets until it chooses one. */
  NOTIFY_SUMMARY: z.enum(["off", "daily", "weekly"]).default("off"),
  /** Hours a failed submission's sealed data is kept for redelivery; 0 (default) not at all. */
  FAILED_RETENTION_HOURS: z.coerce.number().min(0).max(24 * 30).default(0),
  /** Test sends per destination per minute; 0: no limit. */
  TEST_SENDS_PER_DESTINATION: nonNegativeInt.default(6),
  /** Test sends per organization per minute; 0: no limit. */
  TEST_SENDS_PER_ORG: nonNegativeInt.default(20),
  /** Resumes, redeliveries, destination changes and deletions per organization per minute; 0: no limit. */
  ADMIN_OPERATIONS_PER_ORG: nonNegativeInt.default(60),
  /** The window of the outbound budgets below, in seconds. */
  OUTBOUND_WINDOW_SECONDS: positiveInt.default(60),
  /** Outbound requests (deliveries and test sends) per organization per window; 0: no limit. */
  OUTBOUND_ORG_REQUESTS: nonNegativeInt.default(300_000),
  /** Outbound bytes per organization per window; 0: no limit. */
  OUTBOUND_ORG_BYTES: nonNegativeInt.default(256 * 1024 * 1024),
  /** Outbound requests per organization and target host per window; 0: no limit. */
  OUTBOUND_HOST_REQUESTS: nonNegativeInt.default(60_000),
  /** Outbound bytes per organization and target host per window; 0: no limit. */
  OUTBOUND_HOST_BYTES: nonNegativeInt.default(64 * 1024 * 1024),
  METRICS_TOKEN: z.string().min(16, "Expected at least 16 characters").optional(),
  METRICS_PER_FORM: boolean.default(false),
  READY_MAX_BACKLOG: positiveInt.default(10_000),
  LOG_LEVEL: z.enum(["debug", "info", "warn", "error", "silent"]).default("info"),
  /** Set by Deno Deploy; its KV is the platform default there. */
  DENO_DEPLOYMENT_ID: z.string().optional(),
});

function decodesTo32Bytes(value: string): boolean {
  try {
    return Uint8Array.fromBase64(value).length === 32;
  } catch {
    return false;
  }
}

/** Start-up failure naming the variable at fault. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

const PLATFORM_VARS = [
  "PLATFORM_SMTP_HOST",
  "PLATFORM_SMTP_PORT",
  "PLATFORM_SMTP_USERNAME",
  "PLATFORM_SMTP_PASSWORD",
  "PLATFORM_SMTP_FROM_EMAIL",
] as const;

/**
 * The environment as the service's configuration: every variable checked by envSchema,
 * then grouped and converted (seconds to milliseconds, defaults that depend on the
 * process). Its output is the {@linkcode Config} type.
 */
const configSchema = envSchema.transform((e, ctx) => {
  const givenPlatform = PLATFORM_VARS.filter((name) => e[name] !== undefined);
  if (givenPlatform.length > 0 && givenPlatform.length < PLATFORM_VARS.length) {
    const missing = PLATFORM_VARS.find((name) => e[name] === undefined)!;
    ctx.addIssue({
      code: "custom",
      path: [missing],
      message: "required when any PLATFORM_SMTP_* is set",
    });
    return z.NEVER;
  }
  const isDeploy = e.DENO_DEPLOYMENT_ID !== undefined;
  return {
    port: e.PORT,
    /** A file path, ":memory:", a KV Connect URL, or undefined for the platform default. */
    kvPath: e.KV_PATH ?? (isDeploy ? undefined : "data/formrelay.kv"),
    ingestContentTypes: e.INGEST_CONTENT_TYPES,
    captchaVerifyUrl: e.CAPTCHA_VERIFY_URL,
    /** Header carrying the client IP, set by a trusted proxy; null: the connection's address. */
    clientIpHeader: e.CLIENT_IP_HEADER.trim() === ""
      ? null
      : e.CLIENT_IP_HEADER.trim().toLowerCase(),
    /** With X-Forwarded-For: how many entries from the right were added by trusted proxies. */
    trustedProxyHops: e.TRUSTED_PROXY_HOPS,
    /** Limits of the HTTP listener (listener.ts) and of request bodies (ingest/body_gate.ts). */
    http: {
      headersTimeoutMs: e.HTTP_HEADERS_TIMEOUT_MS,
      keepAliveTimeoutMs: e.HTTP_KEEP_ALIVE_TIMEOUT_MS,
      bodyTimeoutMs: e.HTTP_BODY_TIMEOUT_MS,
      /** A body's grace before it must keep its minimum rate. */
      bodyGraceMs: e.HTTP_BODY_GRACE_MS,
      /** Bytes a second a body must average after its grace (0: no minimum). */
      bodyMinBytesPerSecond: e.HTTP_BODY_MIN_RATE,
      /** null: derived from the process's descriptor limit at start-up. */
      maxConnections: e.HTTP_MAX_CONNECTIONS ?? null,
      bodyMemoryBytes: e.HTTP_BODY_MEMORY_BYTES,
      /** The share of bodyMemoryBytes one client may hold (at most half of it). */
      bodyClientBytes: Math.min(e.HTTP_BODY_CLIENT_BYTES, Math.floor(e.HTTP_BODY_MEMORY_BYTES / 2)),
    },
    platformSmtp: givenPlatform.length === 0 ? null : {
      host: e.PLATFORM_SMTP_HOST!,
      port: e.PLATFORM_SMTP_PORT!,
      secureTransport: e.PLATFORM_SMTP_SECURE_TRANSPORT,
      username: e.PLATFORM_SMTP_USERNAME!,
      password: e.PLATFORM_SMTP_PASSWORD!,
      fromEmail: e.PLATFORM_SMTP_FROM_EMAIL!,
    },
    /** Caps of the platform relay: recipients per destination, recipients per org per minute and per UTC day (0: none). */
    relayLimits: {
      maxRecipients: e.PLATFORM_SMTP_MAX_RECIPIENTS,
      orgPerMinute: e.PLATFORM_SMTP_ORG_PER_MINUTE,
      orgPerDay: e.PLATFORM_SMTP_ORG_PER_DAY,
    },
    /** Test sends per destination and per organization per minute (0: no limit). */
    testSendLimits: {
      perDestination: e.TEST_SENDS_PER_DESTINATION,
      perOrg: e.TEST_SENDS_PER_ORG,
    },
    /** Resumes, redeliveries and destination changes per organization per minute (0: no limit). */
    adminOperationsPerOrg: e.ADMIN_OPERATIONS_PER_ORG,
    /** Outbound requests and bytes per organization, and per organization and host, per window (0: none). */
    outbound: {
      windowMs: e.OUTBOUND_WINDOW_SECONDS * 1000,
      orgRequests: e.OUTBOUND_ORG_REQUESTS,
      orgBytes: e.OUTBOUND_ORG_BYTES,
      hostRequests: e.OUTBOUND_HOST_REQUESTS,
      hostBytes: e.OUTBOUND_HOST_BYTES,
    },
    smtpHeloName: e.SMTP_HELO_NAME,
    allowPrivateDestinations: e.ALLOW_PRIVATE_DESTINATIONS,
    /** 32-byte key, base64; null = generate or load beside the local KV file. */
    submissionEncryptionKey: e.SUBMISSION_ENCRYPTION_KEY ?? null,
    submissionEncryptionKeysPrevious: e.SUBMISSION_ENCRYPTION_KEYS_PREVIOUS ?? [],
    deliveryConcurrency: e.DELIVERY_CONCURRENCY ??
      deliveryConcurrencyFor(descriptorLimit() ?? ASSUMED_DESCRIPTOR_LIMIT),
    /** Each destination's pace (delivery/pace.ts): where its concurrency starts, and its cap. */
    pace: { initial: PACE_INITIAL, max: e.DESTINATION_MAX_CONCURRENCY },
    /** Share of the delivery slots one organization may hold (at least one slot). */
    deliveryOrgShare: e.DELIVERY_ORG_SHARE,
    /** Jobs due at most in one process, and the share of them one organization may fill. */
    backlog: { maxJobs: e.BACKLOG_MAX_JOBS, orgShare: e.BACKLOG_ORG_SHARE },
    sweepIntervalMs: e.SWEEP_INTERVAL_SECONDS * 1000,
    /** KV_QUEUES: use the KV's queues where it has them. */
    kvQueues: e.KV_QUEUES,
    publicUrl: e.PUBLIC_URL?.replace(/\/+$/, "") ?? null,
    leaseMs: e.DELIVERY_LEASE_MS,
    retryScheduleMs: e.RETRY_SCHEDULE_SECONDS.split(",").map((s) => Number(s) * 1000),
    httpTimeoutMs: e.HTTP_TIMEOUT_MS,
    /** Base of the Telegram Bot API that telegram destinations send through. */
    telegramApiUrl: e.TELEGRAM_API_URL.replace(/\/+$/, ""),
    smtpTimeoutMs: e.SMTP_TIMEOUT_MS,
    rateLimit: { max: e.RATE_LIMIT_MAX, windowMs: e.RATE_LIMIT_WINDOW_SECONDS * 1000 },
    /** How long a destination fails (its own fault, no delivery between) before it is paused; 0 never. */
    pauseAfterMs: Math.round(e.DESTINATION_PAUSE_AFTER_HOURS * 3600 * 1000),
    /** How long a failed submission's sealed data is kept for redelivery; 0 not at all. */
    failedRetentionMs: Math.round(e.FAILED_RETENTION_HOURS * 3600 * 1000),
    /** Owner notifications' host-wide defaults (notify/). */
    notify: {
      failingAfterAttempts: e.NOTIFY_FAILING_AFTER_ATTEMPTS,
      groupMs: Math.round(e.NOTIFY_GROUP_MINUTES * 60_000),
      summary: e.NOTIFY_SUMMARY,
    },
    /** `/metrics`: bearer token (null: open) and whether labels carry form and destination ids. */
    metrics: { token: e.METRICS_TOKEN ?? null, perForm: e.METRICS_PER_FORM },
    /** `/readyz` answers 503 once this many jobs are due and not yet delivered. */
    readyMaxBacklog: e.READY_MAX_BACKLOG,
    logLevel: e.LOG_LEVEL,
  };
});

/** The parsed configuration: the output of the environment's schema. */
export type Config = z.output<typeof configSchema>;

/** The platform relay for Variant B SMTP destinations. */
export type PlatformSmtp = NonNullable<Config["platformSmtp"]>;

/** Parses the environment once; throws ConfigError naming the first bad variable. */
export function loadConfig(env: Record<string, string | undefined>): Config {
  const parsed = configSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue.path[0]);
    throw new ConfigError(`Invalid ${name}: ${issue.message}`);
  }
  return parsed.data;
}

/**
 * Deliveries in flight by default: enough for receivers that take their time (an
 * in-flight request costs some 60 KB and a descriptor: docs/configuration.md), within a
 * fifth of the descriptor limit, since the listener may take three quarters
 * (listener.ts); where the limit cannot be read, a fifth of ASSUMED_DESCRIPTOR_LIMIT.
 */
export const DEFAULT_DELIVERY_CONCURRENCY = 1024;
/** Deliveries in flight a destination starts with (what each got before it had a pace). */
export const PACE_INITIAL = 8;

/** Deliveries in flight by default for a process with `descriptors`. */
export function deliveryConcurrencyFor(descriptors: number): number {
  return Math.max(16, Math.min(DEFAULT_DELIVERY_CONCURRENCY, Math.floor(descriptors * 0.2)));
}

/**
 * The descriptor limit assumed when the process's own cannot be read: Deno raises its
 * soft limit to the hard one at start-up, and 4 096 is Linux's default hard limit (systemd
 * services and containers get far more). A lower hard limit set by hand is the rare case
 * that start-up's warning asks to configure.
 */
export const ASSUMED_DESCRIPTOR_LIMIT = 4096;

/**
 * The process's open-file limit from /proc/self/limits, or null where it cannot be
 * read: not Linux, or without `--allow-all` (Deno 2 asks for all permissions to read
 * /proc/self, so `deno task start`, with its narrower flags, cannot).
 */
export function descriptorLimit(): number | null {
  try {
    const line = Deno.readTextFileSync("/proc/self/limits").split("\n")
      .find((l) => l.startsWith("Max open files"));
    const soft = Number(line?.split(/\s{2,}/)[1]);
    return Number.isFinite(soft) && soft > 0 ? soft : null;
  } catch {
    return null;
  }
}

/** Every environment variable the service reads, with its default (undefined: none). */
export function environmentVariables(): { name: string; defaultValue: unknown }[] {
  const defaults: Record<string, unknown> = envSchema.parse({});
  return Object.keys(envSchema.shape).map((name) => ({ name, defaultValue: defaults[name] }));
}

/** Whether a KV path is a KV Connect URL (remote) rather than a local file or ":memory:". */
export function isRemoteKvPath(path: string): boolean {
  return /^https?:\/\//.test(path);
}
