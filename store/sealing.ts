/**
 * Encryption at rest: submission envelopes and the secret parts of forms, destinations and
 * notification settings are stored only as AES-256-GCM ciphertext bound to their record id,
 * under a key ring: the current key seals, every key of the ring opens.
 *
 * Sealed layout: a version byte (1), the 4-byte id of the key that sealed it (keyIdOf), a
 * 12-byte IV, the ciphertext and the 16-byte tag. Values sealed before keys had ids are
 * the IV, ciphertext and tag alone; they open with any key of the ring (the tag tells the
 * right one) and count as sealed under that key until `deno task reseal` rewrites them.
 * A legacy value whose first bytes happen to look like a header is caught the same way: a
 * header that does not open is tried as the legacy layout before giving up.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createCipheriv, createDecipheriv, createHmac, timingSafeEqual } from "node:crypto";
import { concatBytes } from "../bytes.ts";
import { isRemoteKvPath } from "../config.ts";

const VERSION = 1;
const KEY_ID_BYTES = 4;
const HEADER_BYTES = 1 + KEY_ID_BYTES;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A sealed value that no key of the ring opens: its key is not given to this service. */
export class UnknownSealingKeyError extends Error {
  override name = "UnknownSealingKeyError";
  /** The id the value names, or null for the layout without one. */
  readonly keyId: string | null;
  constructor(keyId: string | null) {
    super(
      keyId === null
        ? "Sealed value opens with no key of the ring (sealed before keys had ids)"
        : `Sealed with key ${keyId}, which this service does not have`,
    );
    this.keyId = keyId;
  }
}

/** What opening a value found: its plaintext and the key that sealed it. */
export interface Opened {
  plaintext: Uint8Array<ArrayBuffer>;
  /** Id of the ring key that opened it. */
  keyId: string;
  /** Whether it is already in the current layout under the current key (nothing to reseal). */
  current: boolean;
}

/** Seals and opens values with a ring of AES-GCM keys. */
export interface Sealer {
  seal(plaintext: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>>;
  /** Opens a sealed value; UnknownSealingKeyError when no key of the ring opens it. */
  open(sealed: Uint8Array<ArrayBuffer>, context: string): Promise<Uint8Array<ArrayBuffer>>;
  /** As open, and says which key sealed it (for resealing). */
  openReporting(sealed: Uint8Array<ArrayBuffer>, context: string): Promise<Opened>;
  /** The current key's id (it seals); then the others of the ring, in the order given. */
  keyIds: string[];
  /**
   * A keyed hash of `text` (16 bytes, base64url), keyed from the current key: the same
   * text gives the same pseudonym, which cannot be turned back into the text without the
   * key. For values that must be found again but not read, such as a client's address in
   * a KV key.
   */
  pseudonym(text: string): string;
  /** Whether `candidate` is the pseudonym of `text` under any key of the ring. */
  isPseudonym(text: string, candidate: string): boolean;
}

/** The id of a sealing key as values name it: 4 bytes of a keyed hash of it, in hex. */
export function keyIdOf(rawKey: Uint8Array<ArrayBuffer>): string {
  return createHmac("sha256", Buffer.from(rawKey)).update("formrelay key id").digest()
    .subarray(0, KEY_ID_BYTES).toString("hex");
}

interface RingKey {
  id: string;
  idBytes: Uint8Array;
  key: Buffer;
  pseudonymKey: Buffer;
}

function ringKey(rawKey: Uint8Array<ArrayBuffer>): RingKey {
  if (rawKey.length !== 32) throw new Error("The sealing key must be 32 bytes");
  const key = Buffer.from(rawKey);
  const id = keyIdOf(rawKey);
  return {
    id,
    idBytes: Uint8Array.fromHex(id),
    key,
    // Its own key for pseudonyms, derived from the sealing key, never used to encrypt.
    pseudonymKey: createHmac("sha256", key).update("formrelay pseudonyms").digest(),
  };
}

/** AES-256-GCM of IV + ciphertext + tag (Web Crypto's layout); throws when it does not open. */
function decrypt(key: Buffer, body: Uint8Array, context: string): Uint8Array<ArrayBuffer> {
  const decipher = createDecipheriv("aes-256-gcm", key, body.subarray(0, IV_BYTES));
  decipher.setAAD(encoder.encode(context));
  decipher.setAuthTag(body.subarray(body.length - TAG_BYTES));
  const first = decipher.update(body.subarray(IV_BYTES, body.length - TAG_BYTES));
  return concatBytes([first, decipher.final()]);
}

function tryDecrypt(key: Buffer, body: Uint8Array, context: string) {
  if (body.length < IV_BYTES + TAG_BYTES) return null;
  try {
    return decrypt(key, body, context);
  } catch {
    return null;
  }
}

/**
 * Builds a Sealer from the current raw 32-byte key and any earlier ones that may still
 * open values. node:crypto does the work: it is synchronous and about four times cheaper
 * per call than crypto.subtle, on the ingestion hot path.
 */
export function createSealer(
  currentKey: Uint8Array<ArrayBuffer>,
  otherKeys: Uint8Array<ArrayBuffer>[] = [],
): Promise<Sealer> {
  const current = ringKey(currentKey);
  const ring = [current];
  for (const raw of otherKeys) {
    const key = ringKey(raw);
    if (!ring.some((known) => known.id === key.id)) ring.push(key);
  }
  const byId = new Map(ring.map((key) => [key.id, key]));

  function openReporting(sealed: Uint8Array<ArrayBuffer>, context: string): Opened {
    let namedId: string | null = null;
    if (sealed[0] === VERSION && sealed.length >= HEADER_BYTES + IV_BYTES + TAG_BYTES) {
      namedId = Buffer.from(sealed.subarray(1, HEADER_BYTES)).toString("hex");
      const key = byId.get(namedId);
      const plaintext = key && tryDecrypt(key.key, sealed.subarray(HEADER_BYTES), context);
      if (plaintext) return { plaintext, keyId: namedId, current: key === current };
    }
    // The layout without a key id: any key of the ring may have sealed it.
    for (const key of ring) {
      const plaintext = tryDecrypt(key.key, sealed, context);
      if (plaintext) return { plaintext, keyId: key.id, current: false };
    }
    if (namedId !== null && byId.has(namedId)) {
      throw new Error(`Sealed value under key ${namedId} does not open: damaged or misplaced`);
    }
    throw new UnknownSealingKeyError(namedId);
  }

  const pseudonymWith = (key: RingKey, text: string) =>
    createHmac("sha256", key.pseudonymKey).update(text).digest().subarray(0, 16)
      .toString("base64url");

  return Promise.resolve({
    keyIds: ring.map((key) => key.id),
    pseudonym: (text) => pseudonymWith(current, text),
    isPseudonym(text, candidate) {
      const given = encoder.encode(candidate);
      return ring.some((key) => {
        const expected = encoder.encode(pseudonymWith(key, text));
        return expected.length === given.length && timingSafeEqual(expected, given);
      });
    },
    seal(plaintext, context) {
      const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
      const cipher = createCipheriv("aes-256-gcm", current.key, iv);
      cipher.setAAD(encoder.encode(context));
      return Promise.resolve(
        concatBytes([
          Uint8Array.of(VERSION),
          current.idBytes,
          iv,
          cipher.update(plaintext),
          cipher.final(),
          cipher.getAuthTag(),
        ]),
      );
    },
    open(sealed, context) {
      try {
        return Promise.resolve(openReporting(sealed, context).plaintext);
      } catch (error) {
        return Promise.reject(error);
      }
    },
    openReporting(sealed, context) {
      try {
        return Promise.resolve(openReporting(sealed, context));
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
