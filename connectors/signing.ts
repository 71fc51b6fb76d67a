/**
 * Standard Webhooks signing: the `whsec_` secret's form and the `webhook-signature`
 * value a delivery carries.
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
