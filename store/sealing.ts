/**
 * Encryption at rest: submission envelopes and the secret parts of forms and
 * destinations are stored only as AES-GCM ciphertext bound to their record id.
 */

const IV_BYTES = 12;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Seals and opens values with one AES-GCM key. */
export interface Sealer {
  seal(plaintext: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>>;
  open(sealed: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>>;
}

/** Builds a Sealer from a raw 32-byte key. */
export async function createSealer(rawKey: Uint8Array<ArrayBuffer>): Promise<Sealer> {
  const key = await crypto.subtle.importKey("raw", rawKey, "AES-GCM", false, [
    "encrypt",
    "decrypt",
  ]);
  return {
    async seal(plaintext, context) {
      const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
      const params = { name: "AES-GCM", iv, additionalData: encoder.encode(context) };
      const ciphertext = new Uint8Array(await crypto.subtle.encrypt(params, key, plaintext));
      const sealed = new Uint8Array(IV_BYTES + ciphertext.length);
      sealed.set(iv);
      sealed.set(ciphertext, IV_BYTES);
      return sealed;
    },
    async open(sealed, context) {
      const params = {
        name: "AES-GCM",
        iv: sealed.subarray(0, IV_BYTES),
        additionalData: encoder.encode(context),
      };
      return new Uint8Array(await crypto.subtle.decrypt(params, key, sealed.subarray(IV_BYTES)));
    },
  };
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
  if (kvPath === undefined || /^https?:\/\//.test(kvPath)) {
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
