/**
 * Encryption at rest: submission envelopes and the secret parts of forms and
 * destinations are stored only as AES-GCM ciphertext bound to their record id.
 */

import { Buffer } from "node:buffer";
import { createCipheriv, createDecipheriv, createHmac } from "node:crypto";
import { concatBytes } from "../bytes.ts";
import { isRemoteKvPath } from "../config.ts";

const IV_BYTES = 12;
const TAG_BYTES = 16;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Seals and opens values with one AES-GCM key. */
export interface Sealer {
  seal(plaintext: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>>;
  open(sealed: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>>;
  /**
   * A keyed hash of `text` (16 bytes, base64url): the same text gives the same
   * pseudonym, which cannot be turned back into the text without the key. For values
   * that must be found again but not read, such as a client's address in a KV key.
   */
  pseudonym(text: string): string;
}

/**
 * Builds a Sealer from a raw 32-byte key. Layout: 12-byte IV, ciphertext, 16-byte tag
 * (what Web Crypto's AES-GCM produces). node:crypto does the work: it is synchronous
 * and about four times cheaper per call than crypto.subtle, on the ingestion hot path.
 */
export function createSealer(rawKey: Uint8Array<ArrayBuffer>): Promise<Sealer> {
  if (rawKey.length !== 32) throw new Error("The sealing key must be 32 bytes");
  const key = Buffer.from(rawKey);
  // Its own key for pseudonyms, derived from the sealing key, never used to encrypt.
  const pseudonymKey = createHmac("sha256", key).update("formrelay pseudonyms").digest();
  return Promise.resolve({
    pseudonym(text) {
      return createHmac("sha256", pseudonymKey).update(text).digest().subarray(0, 16)
        .toString("base64url");
    },
    seal(plaintext, context) {
      const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      cipher.setAAD(encoder.encode(context));
      return Promise.resolve(
        concatBytes([iv, cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]),
      );
    },
    open(sealed, context) {
      try {
        const decipher = createDecipheriv("aes-256-gcm", key, sealed.subarray(0, IV_BYTES));
        decipher.setAAD(encoder.encode(context));
        decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
        const first = decipher.update(sealed.subarray(IV_BYTES, sealed.length - TAG_BYTES));
        return Promise.resolve(concatBytes([first, decipher.final()]));
      } catch (error) {
        return Promise.reject(error);
      }
    },
  });
}

/** Seals a JSON value into a base64 string. */
export async function sealJson(sealer: Sealer, value: unknown, context: string): Promise<string> {
  return (await sealer.seal(encoder.encode(JSON.stringify(value)), context)).toBase64();
}

/** Opens a value sealed by sealJson. */
export async function openJson<T>(sealer: Sealer, sealed: string, context: string): Promise<T> {
  return JSON.parse(decoder.decode(await sealer.open(Uint8Array.fromBase64(sealed), context)));
}

/**
 * The encryption key: SUBMISSION_ENCRYPTION_KEY when given; for a local KV file, a key
 * kept beside it (created on first start, mode 0600); for ":memory:", a fresh one.
 * A remote or platform KV without the variable is a start-up error: a key generated
 * per isolate would make pending submissions unreadable elsewhere.
 */
export async function loadSealingKey(
  configured: string | null,
  kvPath: string | undefined,
): Promise<Uint8Array<ArrayBuffer>> {
  if (configured) return Uint8Array.fromBase64(configured);
  if (kvPath === ":memory:") return crypto.getRandomValues(new Uint8Array(32));
  if (kvPath === undefined || isRemoteKvPath(kvPath)) {
    throw new Error(
      "Invalid SUBMISSION_ENCRYPTION_KEY: required when KV_PATH is not a local file",
    );
  }
  const keyPath = `${kvPath}.key`;
  try {
    return Uint8Array.fromBase64((await Deno.readTextFile(keyPath)).trim());
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  const key = crypto.getRandomValues(new Uint8Array(32));
  await Deno.writeTextFile(keyPath, key.toBase64() + "\n", { mode: 0o600, createNew: true });
  return key;
}

/** SHA-256 of a string, hex-encoded. */
export async function sha256Hex(text: string): Promise<string> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text))).toHex();
}

/** A new random key with a prefix: `sk_…` or `pk_…`, 32 random bytes in base64url. */
export function newKey(prefix: "sk" | "pk"): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return `${prefix}_${bytes.toBase64({ alphabet: "base64url", omitPadding: true })}`;
}

/**
 * Whether a string may be a form's public key: `pk_` and 16 to 100 base64url characters
 * (newKey makes 43). Checked before any look-up, so a hostile path costs no KV read.
 */
export function isPublicKey(value: string): boolean {
  return /^pk_[A-Za-z0-9_-]{16,100}$/.test(value);
}
