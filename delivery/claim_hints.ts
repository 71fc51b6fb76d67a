/**
 * Claim hints: the jobs this process has just stored, as it wrote them, with their
 * sealed envelope's first chunk, so that claiming one needs no KV read (the claim's
 * versionstamp check proves the job unchanged since). A job without a hint is claimed
 * with a read, so a dropped hint costs a read and nothing else; that read waits behind
 * the commits on KV's one SQLite thread, and skipping it made `bench:deliver` about a
 * quarter faster when every job of its batch had a hint.
 *
 * Hints are bounded twice: in number (at most the jobs the dispatcher holds in memory,
 * so no hint is dropped before its job's turn; the engine sets the bound) and in
 * envelope bytes (a hint keeps its envelope's buffer, up to hundreds of KB for a large
 * submission).
 *
 * @module
 */
import { type KnownJob, refKey } from "../store/job_record.ts";
import type { StoredSubmission } from "../store/submissions.ts";

/** A job as this process stored it, and its envelope's first sealed chunk. */
export interface ClaimHint {
  known: KnownJob;
  firstChunk: Uint8Array<ArrayBuffer>;
}

/** Hints of freshly stored jobs. */
export interface ClaimHints {
  /**
   * Remembers the jobs of a stored submission, those that fit; `waiting` is how many
   * jobs wait for a slot before them.
   */
  remember(
    jobs: KnownJob[],
    submission: Pick<StoredSubmission, "firstChunk">,
    waiting: number,
  ): void;
  /** The hint of a job, once: it is forgotten as it is taken. */
  take(key: string): ClaimHint | undefined;
  /** The versionstamp a hinted job was stored with, the hint left in place. */
  versionstampOf(key: string): string | undefined;
  /** Hints held and the envelope bytes they keep. */
  stats(): { hints: number; bytes: number };
}

/** Hints of at most `maxHints` jobs keeping at most `maxBytes` of envelopes. */
export function createClaimHints(options: { maxHints: number; maxBytes: number }): ClaimHints {
  const hints = new Map<string, ClaimHint>();
  // Envelope buffers held, counted once per hint (the jobs of a submission share theirs).
  let bytes = 0;
  const sizeOf = (hint: ClaimHint) => hint.firstChunk.buffer.byteLength;

  return {
    remember(jobs, { firstChunk }, waiting) {
      const hintBytes = firstChunk.buffer.byteLength;
      for (const [i, known] of jobs.entries()) {
        // Behind a longer line a hint would be dropped before its job's turn comes.
        if (waiting + i >= options.maxHints || hintBytes > options.maxBytes) return;
        // Hints of jobs claimed elsewhere are never taken: start afresh when full.
        if (hints.size >= options.maxHints || bytes + hintBytes > options.maxBytes) {
          hints.clear();
          bytes = 0;
        }
        hints.set(refKey(known.job), { known, firstChunk });
        bytes += hintBytes;
      }
    },
    take(key) {
      const hint = hints.get(key);
      if (hint === undefined) return undefined;
      hints.delete(key);
      bytes -= sizeOf(hint);
      return hint;
    },
    versionstampOf: (key) => hints.get(key)?.known.versionstamp,
    stats: () => ({ hints: hints.size, bytes }),
  };
}
