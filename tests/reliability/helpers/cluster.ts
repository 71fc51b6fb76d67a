/**
 * Shared pieces of the reliability suite: a temp KV file with organizations made
 * through the store, compressed timings for child services, the two tenants' forms,
 * latency percentiles and the plaintext scan of KV files and logs (the admin client
 * over HTTP is tools/admin_client.ts, shared with the benchmarks).
 *
 * @module
 */
import { loadConfig } from "../../../config.ts";
import { startService } from "../../../service.ts";
import { createOrg } from "../../../store/orgs.ts";
import { adminClient, createFormWith } from "../../../tools/admin_client.ts";
import { countKeys } from "../../helpers/kv.ts";
import { waitFor } from "../../helpers/wait.ts";

export {
  type AdminAnswer,
  type AdminClient,
  adminClient,
  createFormWith,
} from "../../../tools/admin_client.ts";

/**
 * Environment of every child service in the suite: timings compressed so that leases,
 * time-outs and retries play out in seconds, no per-IP limit (all load comes from
 * 127.0.0.1), destinations never paused, info logs on stdout.
 */
const RELIABILITY_ENV: Readonly<Record<string, string>> = {
  DELIVERY_LEASE_MS: "4000",
  HTTP_TIMEOUT_MS: "1500",
  SMTP_TIMEOUT_MS: "2500",
  // About 100 s of retries in steps of at most 2 s: a minute's outage is survived.
  RETRY_SCHEDULE_SECONDS: ["0.2", "0.5", "1", ...Array(50).fill("2")].join(","),
  SWEEP_INTERVAL_SECONDS: "0.5",
  RATE_LIMIT_MAX: "0",
  DESTINATION_PAUSE_AFTER_HOURS: "0",
  ALLOW_PRIVATE_DESTINATIONS: "true",
  LOG_LEVEL: "info",
};

/** An organization made through the store. */
export interface Org {
  orgId: string;
  tenantKey: string;
}

/** A temp directory with a KV file prepared for child services. */
export interface Workspace {
  dir: string;
  /** RELIABILITY_ENV plus KV_PATH (and the caller's overrides). */
  env: Record<string, string>;
  orgs: Org[];
  /** Removes the directory. */
  remove(): Promise<void>;
}

/** Makes a temp KV file holding `orgCount` organizations, closed again for the children. */
export async function prepareWorkspace(
  orgCount: number,
  overrides: Record<string, string> = {},
): Promise<Workspace> {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-reliability-" });
  const env = { ...RELIABILITY_ENV, KV_PATH: `${dir}/formrelay.kv`, ...overrides };
  const setup = await startService(loadConfig({ ...env, LOG_LEVEL: "silent" }), {
    deliver: false,
  });
  const orgs: Org[] = [];
  try {
    for (let i = 0; i < orgCount; i++) orgs.push(await createOrg(setup.db, `Org ${i + 1}`));
  } finally {
    await setup.close();
  }
  return { dir, env, orgs, remove: () => Deno.remove(dir, { recursive: true }) };
}

/**
 * The two tenants of the fairness and flood tests on a running service: tenant X's form
 * with two webhooks (`xSinkUrl` + "/one" and "/two"), tenant Y's with one at `ySinkUrl`.
 */
export async function twoTenantForms(
  origin: string,
  orgs: Org[],
  sinks: { xSinkUrl: string; ySinkUrl: string },
) {
  const [x, y] = orgs;
  const formX = await createFormWith(adminClient(() => origin, x.tenantKey), "X", [
    { type: "webhook", config: { url: `${sinks.xSinkUrl}/one` } },
    { type: "webhook", config: { url: `${sinks.xSinkUrl}/two` } },
  ]);
  const formY = await createFormWith(adminClient(() => origin, y.tenantKey), "Y", [
    { type: "webhook", config: { url: sinks.ySinkUrl } },
  ]);
  return { formX, formY };
}

/** Posts one JSON submission; the submission id on 202, else null (status in `status`). */
export async function submit(
  origin: string,
  publicKey: string,
  payload: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; submissionId: string | null; retryAfter: string | null }> {
  const response = await fetch(`${origin}/v1/f/${publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(payload),
  });
  const body = await response.json().catch(() => null);
  return {
    status: response.status,
    submissionId: response.status === 202 ? body?.submissionId ?? null : null,
    retryAfter: response.headers.get("retry-after"),
  };
}

/**
 * Waits until no delivery job is left in the KV file: none can be sent again (a job whose
 * result was not recorded stays in KV and is sent again after its lease).
 */
export async function waitForNoJobs(kvPath: string, timeoutMs = 30_000): Promise<void> {
  const watch = await Deno.openKv(kvPath);
  try {
    await waitFor(async () => await countKeys(watch, "jobs") === 0, {
      timeoutMs,
      message: "jobs still in KV",
    });
  } finally {
    watch.close();
  }
}

/** The p-th percentile (0–100) of some numbers, nearest rank; NaN when empty. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

/** Whether `needle` occurs in `haystack`. */
function containsBytes(haystack: Uint8Array, needle: Uint8Array): boolean {
  const first = needle[0];
  for (let i = haystack.indexOf(first); i !== -1; i = haystack.indexOf(first, i + 1)) {
    if (i + needle.length > haystack.length) return false;
    let j = 1;
    while (j < needle.length && haystack[i + j] === needle[j]) j++;
    if (j === needle.length) return true;
  }
  return false;
}

/**
 * Where a marker occurs in plaintext: every file in `dir` (the KV file, its WAL and
 * journal) and the given log lines. Returns the places, empty when none.
 */
export async function findPlaintext(
  marker: string,
  places: { dir: string; logs: string[] },
): Promise<string[]> {
  const needle = new TextEncoder().encode(marker);
  const found: string[] = [];
  for await (const entry of Deno.readDir(places.dir)) {
    if (!entry.isFile) continue;
    const bytes = await Deno.readFile(`${places.dir}/${entry.name}`);
    if (containsBytes(bytes, needle)) found.push(entry.name);
  }
  if (places.logs.some((line) => line.includes(marker))) found.push("logs");
  return found;
}

/**
 * The config of an SMTP destination on a plaintext test relay on loopback, with the
 * test server's default credentials (tests/helpers/smtp_server.ts).
 */
export function loopbackSmtpConfig(port: number) {
  return {
    host: "127.0.0.1",
    port,
    secureTransport: "off",
    username: "relay-user",
    password: "relay-pässword",
    from: "forms@tenant.example",
    to: ["owner@tenant.example"],
  };
}
