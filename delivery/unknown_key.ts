/**
 * A delivery job whose envelope or destination config is sealed under a key this
 * process does not have: not a failure of the destination or the submission, but of the
 * operator's key ring. The job is held (delivery/apply_result.ts) with this reason and
 * looked at again until the key is configured, never retried into failure or dropped.
 *
 * @module
 */
import { UnknownSealingKeyError } from "../store/sealing.ts";

/** A part of a job sealed under a key this process lacks: what it is and the key's id. */
export class UnknownKeyFound extends Error {
  override name = "UnknownKeyFound";
  constructor(readonly value: "envelope" | "destination", readonly keyId: string | null) {
    super(
      `The ${value === "envelope" ? "submission" : "destination config"} is sealed under ` +
        (keyId === null ? "an earlier key (no id)" : `key ${keyId}`) +
        ", which this service does not have",
    );
  }
}

/** What a held job's record says while its key is missing (no secret: the id only). */
export function unknownKeyReason(found: UnknownKeyFound): string {
  return `${found.message}: held until the key is configured again`;
}

/** Opens a sealed part of a job; a key this process lacks comes back as UnknownKeyFound. */
export async function sealedPart<T>(value: UnknownKeyFound["value"], open: () => Promise<T>) {
  try {
    return await open();
  } catch (error) {
    if (error instanceof UnknownSealingKeyError) throw new UnknownKeyFound(value, error.keyId);
    throw error;
  }
}
