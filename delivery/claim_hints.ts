/**
 * Claim hints: the jobs this process has just stored, as it wrote them, with their
 * envelope's JSON, so that claiming one needs no KV read (the claim's versionstamp check
 * proves the job unchanged since) and delivering it nothing to open. A job without a
 * hint is claimed with a read, so a dropped hint costs a read and an open and nothing
 * else; that read waits behind the commits on KV's one SQLite thread, which is why hints
 * pay (docs/design.md, "Claim hints for every waiting job").
 *
 * Hints are bounded twice: in jobs (at most the jobs the dispatcher holds in memory,
 * so no hint is dropped before its job's turn; the engine sets the bound) and in
 * envelope bytes (a hint keeps its envelope's JSON, up to hundreds of KB for a large
 * submission, counted at two bytes a character: what a string of any text may take). One entry serves all the jobs of a submission, which differ only in
 * their destination, so a submission's jobs cost little more heap than one of them.
 *
 * @module
 */
import type { DestinationType } from "../connectors/registry.ts";
import type { JobRecord, KnownJob } from "../store/job_record.ts";
import type { JobKeyParts } from "../store/keys.ts";
import type { StoredSubmission } from "../store/submissions.ts";

/**
 * A submission this process just stored: its jobs as written and its envelope's JSON,
 * which stays in memory (KV has it sealed).
 */
export interface FreshSubmission extends StoredSubmission {
  envelopeJson: string;
}

/** A job as this process stored it, and its envelope's JSON. */
export interface ClaimHint {
  known: KnownJob;
  envelopeJson: string;
}

/** Hints of freshly stored jobs. */
export interface ClaimHints {
  /**
   * Remembers the jobs of a stored submission, those that fit; `waiting` is how many
   * jobs wait for a slot before them.
   */
  remember(
    jobs: KnownJob[],
    submission: Pick<FreshSubmission, "envelopeJson">,
    waiting: number,
  ): void;
  /** The hint of a job, once: it is forgotten as it is taken. */
  take(ref: JobKeyParts): ClaimHint | undefined;
  /** The versionstamp a hinted job was stored with, the hint left in place. */
  versionstampOf(ref: JobKeyParts): string | undefined;
  /** Jobs with a hint and the envelope bytes their hints keep (envelopeBytes). */
  stats(): { hints: number; bytes: number };
}

/** The hints of one submission's jobs. */
interface SubmissionHint {
  /** One of its jobs as stored: the others differ only in destination and type. */
  template: JobRecord;
  versionstamp: string;
  envelopeJson: string;
  /** The destinations whose jobs have a hint still, and their types. */
  destinations: Map<string, DestinationType>;
}

/** What an envelope's JSON is counted as: two bytes a character, whatever its text. */
export function envelopeBytes(json: string): number {
  return json.length * 2;
}

/** Hints of at most `maxHints` jobs keeping at most `maxBytes` of envelopes. */
export function createClaimHints(options: { maxHints: number; maxBytes: number }): ClaimHints {
  const bySubmission = new Map<string, SubmissionHint>();
  let jobs = 0;
  let bytes = 0;

  function forget(submissionId: string, hint: SubmissionHint) {
    bySubmission.delete(submissionId);
    bytes -= envelopeBytes(hint.envelopeJson);
  }

  /** The untaken hint of a job, with its submission's. */
  function find(ref: JobKeyParts) {
    const hint = bySubmission.get(ref.submissionId);
    const type = hint?.destinations.get(ref.destinationId);
    return hint === undefined || type === undefined ? null : { hint, type };
  }

  return {
    remember(stored, { envelopeJson }, waiting) {
      // Behind a longer line a hint would be dropped before its job's turn comes.
      const fitting = stored.slice(0, Math.max(0, options.maxHints - waiting));
      const size = envelopeBytes(envelopeJson);
      if (fitting.length === 0 || size > options.maxBytes) return;
      // Hints of jobs claimed elsewhere are never taken: start afresh when full.
      if (jobs + fitting.length > options.maxHints || bytes + size > options.maxBytes) {
        bySubmission.clear();
        jobs = 0;
        bytes = 0;
      }
      const [{ job, versionstamp }] = fitting;
      bySubmission.set(job.submissionId, {
        template: job,
        versionstamp,
        envelopeJson,
        destinations: new Map(fitting.map(({ job }) => [job.destinationId, job.type])),
      });
      jobs += fitting.length;
      bytes += size;
    },
    take(ref) {
      const found = find(ref);
      if (found === null) return undefined;
      const { hint, type } = found;
      hint.destinations.delete(ref.destinationId);
      jobs--;
      if (hint.destinations.size === 0) forget(ref.submissionId, hint);
      const job: JobRecord = { ...hint.template, destinationId: ref.destinationId, type };
      return { known: { job, versionstamp: hint.versionstamp }, envelopeJson: hint.envelopeJson };
    },
    versionstampOf: (ref) => find(ref)?.hint.versionstamp,
    stats: () => ({ hints: jobs, bytes }),
  };
}
