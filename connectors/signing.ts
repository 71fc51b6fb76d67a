/**
 * Standard Webhooks signing with rotation: the `whsec_` secret's form, and the
 * `webhook-signature` value a delivery carries. A config holds its current `secret` and
 * the earlier ones still within their grace period (`previousSecrets`, each with the
 * time it stops): every delivery is signed with all of them, as space-separated `v1,…`
 * entries (Standard Webhooks), so a receiver holding either the new or an earlier secret
 * verifies it, and the owner changes the receiver's secret at leisure within the grace.
 * The webhook destinations and the operational webhook both sign here.
 *
 * @module
 */
import { z } from "zod";

/** The key bytes of a `whsec_` secret: the base64 after the prefix; throws when not base64. */
function secretKey(secret: string): Uint8Array<ArrayBuffer> {
  return Uint8Array.fromBase64(secret.slice("whsec_".length));
}

/** Standard Webhooks signing secret: `whsec_` + base64 of at least 24 bytes. */
export const webhookSecret = z.string().refine((value) => {
  if (!value.startsWith("whsec_")) return false;
  try {
    return secretKey(value).length >= 24;
  } catch {
    return false;
  }
}, 'Expected "whsec_" followed by at least 24 bytes in base64');

/**
 * A Standard Webhooks signature: `v1,` + base64 HMAC-SHA256 of `<id>.<timestamp>.<body>`,
 * keyed with the base64-decoded part of the secret after `whsec_`.
 */
export async function sign(secret: string, content: string): Promise<string> {
  const key = await crypto.subtle.importKey(
    "raw",
    secretKey(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const data = new TextEncoder().encode(content);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, data));
  return `v1,${mac.toBase64()}`;
}

/** An earlier secret that still signs until `until` (an ISO time), after a rotation. */
export interface PreviousSecret {
  secret: string;
  until: string;
}

/** The signing fields of a config: the current secret and the earlier ones in their grace. */
export interface SigningSecrets {
  /** Absent or null: deliveries are not signed. */
  secret?: string | null;
  previousSecrets?: PreviousSecret[];
}

/** Most earlier secrets that sign at once: a further rotation drops the one stopping first. */
export const MAX_PREVIOUS_SECRETS = 5;

/** The longest grace period (Svix's 7 days) and the default one, in hours. */
export const MAX_GRACE_HOURS = 168;
export const DEFAULT_GRACE_HOURS = 24;

/** The stored form of `previousSecrets` (never accepted from a client: only rotation writes it). */
export const previousSecretsSchema = z.array(
  z.strictObject({ secret: webhookSecret, until: z.iso.datetime() }),
).max(MAX_PREVIOUS_SECRETS);

/** The body of a rotate-secret request: how long the current secret keeps signing. */
export const rotateSecretSchema = z.strictObject({
  graceHours: z.number().min(0).max(MAX_GRACE_HOURS).default(DEFAULT_GRACE_HOURS).meta({
    description: `How long the replaced secret keeps signing, in hours (0 to ${MAX_GRACE_HOURS})`,
  }),
});

/** A fresh signing secret: `whsec_` and 32 random bytes in base64. */
export function newSigningSecret(): string {
  return `whsec_${crypto.getRandomValues(new Uint8Array(32)).toBase64()}`;
}

/** The earlier secrets still signing at `now` (expiry is exact: at `until` one stops). */
function unexpired(previous: PreviousSecret[] | undefined, now: number): PreviousSecret[] {
  return (previous ?? []).filter((entry) => Date.parse(entry.until) > now);
}

/** The secrets a delivery at `now` is signed with: the current one first. */
export function signingSecretsAt(config: SigningSecrets, now: number): string[] {
  if (!config.secret) return [];
  return [config.secret, ...unexpired(config.previousSecrets, now).map((entry) => entry.secret)];
}

/**
 * The `webhook-signature` value of a delivery at `now`: one `v1,<signature>` per secret,
 * space-separated; null when the config has no secret.
 */
export async function signatureHeader(
  config: SigningSecrets,
  options: { content: string; now: number },
): Promise<string | null> {
  const secrets = signingSecretsAt(config, options.now);
  if (secrets.length === 0) return null;
  const signatures = await Promise.all(secrets.map((secret) => sign(secret, options.content)));
  return signatures.join(" ");
}

/** Until when the earlier secrets sign (the latest of them), or null when none does. */
export function previousSecretValidUntil(config: SigningSecrets, now: number): string | null {
  const untils = unexpired(config.previousSecrets, now).map((entry) => entry.until);
  return untils.length === 0 ? null : untils.sort().at(-1)!;
}

/**
 * A config with a new current secret; the replaced one keeps signing for `graceMs`
 * (none with 0, and none when there was no secret). Returns the config, the new secret
 * (to be shown once) and until when the replaced one signs.
 */
export function rotateSigningSecret<C extends SigningSecrets>(
  config: C,
  options: { now: number; graceMs: number },
): { config: C & SigningSecrets; secret: string; previousValidUntil: string | null } {
  const { now, graceMs } = options;
  const secret = newSigningSecret();
  const previous = unexpired(config.previousSecrets, now);
  let previousValidUntil: string | null = null;
  if (config.secret && graceMs > 0) {
    previousValidUntil = new Date(now + graceMs).toISOString();
    previous.push({ secret: config.secret, until: previousValidUntil });
  }
  // Kept: the ones stopping last.
  previous.sort((a, b) => a.until.localeCompare(b.until));
  const kept = previous.slice(-MAX_PREVIOUS_SECRETS);
  const rotated = {
    ...withoutPreviousSecrets(config),
    secret,
    ...(kept.length > 0 ? { previousSecrets: kept } : {}),
  };
  return { config: rotated, secret, previousValidUntil };
}

/**
 * An edited config with the stored one's earlier secrets still in their grace, when the
 * edit keeps the current secret; an edit that replaces or removes the secret ends them
 * (a secret replaced by hand is taken to be compromised: rotate for an overlap).
 */
export function keepPreviousSecrets<C extends SigningSecrets>(
  stored: SigningSecrets,
  edited: C,
  now: number,
): C & SigningSecrets {
  const previous = unexpired(stored.previousSecrets, now);
  const rest = withoutPreviousSecrets(edited);
  if (previous.length === 0 || !edited.secret || edited.secret !== stored.secret) {
    return rest;
  }
  return { ...rest, previousSecrets: previous };
}

/** The config without its earlier secrets (for answers: they are never shown). */
export function withoutPreviousSecrets<C extends SigningSecrets>(config: C): C {
  const { previousSecrets: _, ...rest } = config;
  return rest as C;
}
