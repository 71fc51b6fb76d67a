/**
 * Every KV key and prefix of formrelay, in one place: typed builders that return
 * tuples, and readers for the keys whose parts are read back from a listing. No other
 * module builds a key or reads one by position.
 *
 * Layout (snake_case prefixes):
 * - `orgs/<orgId>` organization; `tenant_keys/<sha256>` tenant key by hash;
 *   `tenant_keys_by_org/<orgId>/<sha256>` the active keys of an organization.
 * - `forms/<formId>`; `forms_by_org/<orgId>/<formId>`; `forms_by_public_key/<pk>`.
 * - `destinations/<formId>/<destinationId>`; `destination_failing/<destinationId>` since
 *   when a destination has been failing (destination_health.ts).
 * - `jobs/<submittedAt>/<submissionId>/<destinationId>` unfinished delivery jobs;
 *   `envelopes/<submittedAt>/<submissionId>/<chunk>` sealed envelope chunks;
 *   `envelope_checks/<submittedAt>/<submissionId>/<destinationId>` cleanup markers;
 *   `deliveries/<formId>/<submittedAt>/<submissionId>/<destinationId>` outcomes;
 *   `retained/<submittedAt>/<submissionId>/<destinationId>` failed deliveries whose
 *   envelope is kept for redelivery (FAILED_RETENTION_HOURS, redelivery.ts);
 *   `jobs_by_destination/<destinationId>/<submittedAt>/<submissionId>` and
 *   `retained_by_destination/<destinationId>/<submittedAt>/<submissionId>` index both
 *   by destination, so a tenant's resume or redelivery reads its destination's entries,
 *   not everyone's: a retained record's from its first commit, a job's from its first
 *   put-back (retrying or held; held from the start when stored held). A job's own key
 *   is found from its delivery id, whose submission id holds `submittedAt`
 *   (submission_id.ts).
 * - `relay_usage/<orgId>/<day>` platform relay recipients of an organization per UTC day.
 * - `rate/<formId>/<client hash>/<window>/<counterId>` rate-limit counts, one per process
 *   (and per counter it made); `rate_processes/<processId>` when a process that counts
 *   clients last said it runs (kept two windows); `health` the /healthz probe.
 * - `test_send_under_way/<destinationId>` the one test send under way to a destination;
 *   `test_send_buckets/<orgId>/<scope>` an organization's test sends lately, per scope
 *   (`sends`, `destination:<id>`, `notifications`): test_send_limits.ts.
 * - `process_shares/<processId>/<chunk>` what a live process shares with the others: its
 *   paces and its recent budget usage (process_shares.ts); they expire within seconds.
 * - `page_token_uses/<formId>/<signature>` a time-trap page token that let a submission
 *   through, kept while the token could still be good (rules/spam.ts).
 * - `refusals/<formId>/<day>/<reason>` how many submissions to a form were refused (or
 *   went nowhere) on a UTC day, by reason (refusals.ts); never the submission.
 *   `refused_origins/<formId>` the last few distinct sites refused for their origin (origins
 *   only, with when each was last refused).
 * - `confirmation_sent/<formId>/<address hash>` a confirmation sent to a visitor's address
 *   in the last 24 hours (a keyed hash, never the address); `confirmation_hour/<formId>/<epoch
 *   hour>` a form's confirmations in one hour (confirmations.ts).
 * - Owner notifications (notifications.ts): `notify_settings/<orgId>` an organization's
 *   settings (sealed); `notify_outbox/<orgId>/<type>/<subject>` events waiting to be told,
 *   grouped, and `notify_outbox_due/<dueAt>/<orgId>/<type>/<subject>` when each group is
 *   due; `notify_last/<orgId>/<type>/<subject>` when such an event was last told;
 *   `notify_jobs/<orgId>/<id>` one notification to send to one channel (a notice job of the
 *   delivery engine), and `notify_due/<dueAt>/<orgId>/<id>` when it is due or its lease
 *   ends; `notify_log/<orgId>/<at>/<id>` what was sent; `notify_summaries/<orgId>/<period>`
 *   a summary period already queued. The `*_due` indexes lead with the time, so a pass
 *   lists what is due and stops; every family carries the organization id. Whether a
 *   destination's owner was told it is failing is part of its failing record
 *   (`destination_failing`, destination_health.ts); `notify_confirm_tokens/<sha256>` the link
 *   that confirms a notification address (notify_confirmations.ts).
 *
 * Keys under `jobs`, `envelopes` and `envelope_checks` lead with the acceptance time:
 * new entries append at the end of the KV's B-tree instead of landing on random pages,
 * which makes commits several times cheaper.
 *
 * @module
 */

/** A job's identity: the parts of its key. */
export interface JobKeyParts {
  submittedAt: number;
  submissionId: string;
  destinationId: string;
}

// Organizations and tenant keys.

/** An organization record. */
export const orgKey = (orgId: string): ["orgs", string] => ["orgs", orgId];
/** Prefix of every organization record. */
export const orgsPrefix = (): ["orgs"] => ["orgs"];
/** A tenant key record, by the SHA-256 hex of the key. */
export const tenantKeyKey = (hash: string): ["tenant_keys", string] => ["tenant_keys", hash];
/** Index entry: an active tenant key of an organization. */
export const tenantKeyByOrgKey = (
  orgId: string,
  hash: string,
): ["tenant_keys_by_org", string, string] => ["tenant_keys_by_org", orgId, hash];
/** Prefix of an organization's active tenant keys. */
export const tenantKeysByOrgPrefix = (orgId: string): ["tenant_keys_by_org", string] => [
  "tenant_keys_by_org",
  orgId,
];
/** The key hash of a tenant_keys_by_org entry. */
export function hashOfTenantKeyByOrgKey(key: Deno.KvKey): string {
  return (key as ReturnType<typeof tenantKeyByOrgKey>)[2];
}

// Forms.

/** A form record. */
export const formKey = (formId: string): ["forms", string] => ["forms", formId];
/** Prefix of every form record. */
export const formsPrefix = (): ["forms"] => ["forms"];
/** Index entry: a form of an organization. */
export const formByOrgKey = (orgId: string, formId: string): ["forms_by_org", string, string] => [
  "forms_by_org",
  orgId,
  formId,
];
/** Prefix of an organization's forms index. */
export const formsByOrgPrefix = (orgId: string): ["forms_by_org", string] => [
  "forms_by_org",
  orgId,
];
/** The form id of a forms_by_org entry. */
export function formIdOfByOrgKey(key: Deno.KvKey): string {
  return (key as ReturnType<typeof formByOrgKey>)[2];
}
/** Index entry: the form id behind a public key. */
export const formByPublicKeyKey = (publicKey: string): ["forms_by_public_key", string] => [
  "forms_by_public_key",
  publicKey,
];

// Destinations.

/** A destination record; destinations live under their form. */
export const destinationKey = (
  formId: string,
  destinationId: string,
): ["destinations", string, string] => ["destinations", formId, destinationId];
/** Prefix of every destination record. */
export const destinationsPrefix = (): ["destinations"] => ["destinations"];
/** Prefix of a form's destinations. */
export const destinationsOfFormPrefix = (formId: string): ["destinations", string] => [
  "destinations",
  formId,
];
/** Since when a destination has been failing, when it is (see destination_health.ts). */
export const destinationFailingKey = (
  destinationId: string,
): ["destination_failing", string] => ["destination_failing", destinationId];

// Delivery jobs, envelopes, cleanup markers and outcomes.

/** An unfinished delivery job. */
export const jobKey = (ref: JobKeyParts): ["jobs", number, string, string] => [
  "jobs",
  ref.submittedAt,
  ref.submissionId,
  ref.destinationId,
];
/** Prefix of every unfinished job. */
export const jobsPrefix = (): ["jobs"] => ["jobs"];
/** Prefix of the unfinished jobs of one submission. */
export const jobsOfSubmissionPrefix = (
  submittedAt: number,
  submissionId: string,
): ["jobs", number, string] => ["jobs", submittedAt, submissionId];
/** The identity a job key holds. */
export function jobKeyParts(key: Deno.KvKey): JobKeyParts {
  const [, submittedAt, submissionId, destinationId] = key as ReturnType<typeof jobKey>;
  return { submittedAt, submissionId, destinationId };
}

/** One sealed chunk of a submission's envelope. */
export const envelopeChunkKey = (
  submittedAt: number,
  submissionId: string,
  index: number,
): ["envelopes", number, string, number] => ["envelopes", submittedAt, submissionId, index];

/** Prefix of every sealed envelope chunk. */
export const envelopesPrefix = (): ["envelopes"] => ["envelopes"];

/** A finished job's note that the envelope may have to go (see envelope_cleanup.ts). */
export const envelopeCheckKey = (ref: JobKeyParts): ["envelope_checks", number, string, string] => [
  "envelope_checks",
  ref.submittedAt,
  ref.submissionId,
  ref.destinationId,
];
/** Prefix of every envelope check marker. */
export const envelopeChecksPrefix = (): ["envelope_checks"] => ["envelope_checks"];
/** The job identity an envelope check marker holds. */
export function envelopeCheckKeyParts(key: Deno.KvKey): JobKeyParts {
  const [, submittedAt, submissionId, destinationId] = key as ReturnType<typeof envelopeCheckKey>;
  return { submittedAt, submissionId, destinationId };
}

/** A failed delivery kept for redelivery (FAILED_RETENTION_HOURS). */
export const retainedKey = (ref: JobKeyParts): ["retained", number, string, string] => [
  "retained",
  ref.submittedAt,
  ref.submissionId,
  ref.destinationId,
];
/** Prefix of every retained failed delivery. */
export const retainedPrefix = (): ["retained"] => ["retained"];
/** Prefix of the retained failed deliveries of one submission. */
export const retainedOfSubmissionPrefix = (
  submittedAt: number,
  submissionId: string,
): ["retained", number, string] => ["retained", submittedAt, submissionId];

/**
 * Index entry of an unfinished job by destination (its value is unused). Within a
 * destination, entries lead with the acceptance time, so new ones append at the end of
 * its range, as job keys do (keyed by submission id they landed on random pages and
 * made each submission's commit about three times dearer).
 */
export const jobByDestinationKey = (
  ref: JobKeyParts,
): ["jobs_by_destination", string, number, string] => [
  "jobs_by_destination",
  ref.destinationId,
  ref.submittedAt,
  ref.submissionId,
];
/** Prefix of a destination's unfinished jobs index. */
export const jobsByDestinationPrefix = (
  destinationId: string,
): ["jobs_by_destination", string] => ["jobs_by_destination", destinationId];

/** Index entry of a retained failed delivery by destination (laid out as jobByDestinationKey). */
export const retainedByDestinationKey = (
  ref: JobKeyParts,
): ["retained_by_destination", string, number, string] => [
  "retained_by_destination",
  ref.destinationId,
  ref.submittedAt,
  ref.submissionId,
];
/** Prefix of a destination's retained failed deliveries index. */
export const retainedByDestinationPrefix = (
  destinationId: string,
): ["retained_by_destination", string] => ["retained_by_destination", destinationId];

/** The job identity a by-destination index key (jobs or retained) names. */
export function jobKeyPartsOfIndexKey(key: Deno.KvKey): JobKeyParts {
  const [, destinationId, submittedAt, submissionId] = key as ReturnType<
    typeof jobByDestinationKey
  >;
  return { submittedAt, submissionId, destinationId };
}

/** A delivery outcome, listed per form newest first. */
export const outcomeKey = (
  job: JobKeyParts & { formId: string },
): ["deliveries", string, number, string, string] => [
  "deliveries",
  job.formId,
  job.submittedAt,
  job.submissionId,
  job.destinationId,
];
/** Prefix of a form's delivery outcomes. */
export const outcomesOfFormPrefix = (formId: string): ["deliveries", string] => [
  "deliveries",
  formId,
];

// Rate limits and health.

/**
 * One process's rate-limit count of one form, client (a keyed hash, never an address) and
 * window, under the id of its counter there; the client's count is the sum of them all.
 */
export const rateKey = (
  formId: string,
  client: string,
  window: number,
  counterId: string,
): ["rate", string, string, number, string] => ["rate", formId, client, window, counterId];
/** Prefix of every process's count of one form, client and window. */
export const rateCountsPrefix = (
  formId: string,
  client: string,
  window: number,
): ["rate", string, string, number] => ["rate", formId, client, window];

/** When process `processId` last said it counts clients (store/rate_limit.ts). */
export const rateProcessKey = (processId: string): ["rate_processes", string] => [
  "rate_processes",
  processId,
];
/** Prefix of every rate-counting process's mark. */
export const rateProcessesPrefix = (): ["rate_processes"] => ["rate_processes"];
/** The process id of a rate_processes key. */
export function processIdOfRateProcessKey(key: Deno.KvKey): string {
  return (key as ReturnType<typeof rateProcessKey>)[1];
}

/** A test send under way to a destination, in some process (store/test_sends.ts). */
export const testSendUnderWayKey = (
  destinationId: string,
): ["test_send_under_way", string] => ["test_send_under_way", destinationId];

/** An organization's test sends lately in one scope (store/test_send_limits.ts). */
export const testSendBucketKey = (
  orgId: string,
  scope: string,
): ["test_send_buckets", string, string] => ["test_send_buckets", orgId, scope];

/** One chunk of what a process shares with the others (store/process_shares.ts). */
export const processSharesKey = (
  processId: string,
  chunk: number,
): ["process_shares", string, number] => ["process_shares", processId, chunk];
/** Prefix of every process's shares. */
export const processSharesPrefix = (): ["process_shares"] => ["process_shares"];
/** The process id of a process_shares key. */
export function processIdOfSharesKey(key: Deno.KvKey): string {
  return (key as ReturnType<typeof processSharesKey>)[1];
}

/** Platform relay recipients an organization was sent on one UTC day (`YYYY-MM-DD`). */
export const relayUsageKey = (orgId: string, day: string): ["relay_usage", string, string] => [
  "relay_usage",
  orgId,
  day,
];

/** The key /healthz reads to see that the KV answers (never written). */
export const healthKey = (): ["health"] => ["health"];

// Refusal counts.

/** The count of a form's refusals for one reason on one UTC day (`YYYY-MM-DD`). */
export const refusalCountKey = (
  formId: string,
  day: string,
  reason: string,
): ["refusals", string, string, string] => ["refusals", formId, day, reason];
/** Prefix of a form's refusal counts. */
export const refusalsOfFormPrefix = (formId: string): ["refusals", string] => [
  "refusals",
  formId,
];
/** The last few distinct origins a form refused (store/refusals.ts). */
export const refusedOriginsKey = (formId: string): ["refused_origins", string] => [
  "refused_origins",
  formId,
];
/** The day and reason of a refusal count key. */
export function refusalCountKeyParts(key: Deno.KvKey): { day: string; reason: string } {
  const [, , day, reason] = key as ReturnType<typeof refusalCountKey>;
  return { day, reason };
}

/**
 * A confirmation sent to an address from a form in the last 24 hours, under a keyed hash
 * of the address (never the address): store/confirmations.ts.
 */
export const confirmationSentKey = (
  formId: string,
  addressHash: string,
): ["confirmation_sent", string, string] => ["confirmation_sent", formId, addressHash];

/** Confirmations a form sent in one hour (epoch hours): store/confirmations.ts. */
export const confirmationHourKey = (
  formId: string,
  hour: number,
): ["confirmation_hour", string, number] => ["confirmation_hour", formId, hour];

/** A page token that let a submission to a form through (rules/spam.ts): it is good once. */
export const pageTokenUseKey = (
  formId: string,
  signature: string,
): ["page_token_uses", string, string] => ["page_token_uses", formId, signature];

// Owner notifications (store/notifications.ts).

/** An organization's notification settings (sealed). */
export const notifySettingsKey = (orgId: string): ["notify_settings", string] => [
  "notify_settings",
  orgId,
];
/** Prefix of every organization's notification settings. */
export const notifySettingsPrefix = (): ["notify_settings"] => ["notify_settings"];
/** Events of one type and subject waiting to be told, grouped. */
export const notifyOutboxKey = (
  orgId: string,
  type: string,
  subject: string,
): ["notify_outbox", string, string, string] => ["notify_outbox", orgId, type, subject];
/** Prefix of every organization's waiting events. */
export const notifyOutboxPrefix = (): ["notify_outbox"] => ["notify_outbox"];
/** When an event of this type and subject was last told (expires after the grouping window). */
export const notifyLastKey = (
  orgId: string,
  type: string,
  subject: string,
): ["notify_last", string, string, string] => ["notify_last", orgId, type, subject];
/** One notification to send to one channel (a notice job of the delivery engine). */
export const notifyJobKey = (orgId: string, id: string): ["notify_jobs", string, string] => [
  "notify_jobs",
  orgId,
  id,
];
/** Prefix of an organization's notification jobs. */
export const notifyJobsPrefix = (orgId?: string): ["notify_jobs"] | ["notify_jobs", string] =>
  orgId === undefined ? ["notify_jobs"] : ["notify_jobs", orgId];
/**
 * Index entry: a notification job due (or its lease ending) at `dueAt`. Time first, so
 * the sweep lists what is due and stops: a pass reads what is due, not what exists.
 */
export const notifyDueKey = (
  dueAt: number,
  orgId: string,
  id: string,
): ["notify_due", number, string, string] => ["notify_due", dueAt, orgId, id];
/** Prefix of every notification job's due entry. */
export const notifyDuePrefix = (): ["notify_due"] => ["notify_due"];
/** The due time, organization and job id a notify_due key holds. */
export function notifyDueParts(key: Deno.KvKey): { dueAt: number; orgId: string; id: string } {
  const [, dueAt, orgId, id] = key as ReturnType<typeof notifyDueKey>;
  return { dueAt, orgId, id };
}
/** Index entry: an outbox group due to be told at `dueAt` (time first, as notify_due). */
export const notifyOutboxDueKey = (
  dueAt: number,
  orgId: string,
  type: string,
  subject: string,
): ["notify_outbox_due", number, string, string, string] => [
  "notify_outbox_due",
  dueAt,
  orgId,
  type,
  subject,
];
/** Prefix of every outbox group's due entry. */
export const notifyOutboxDuePrefix = (): ["notify_outbox_due"] => ["notify_outbox_due"];
/** The outbox key a notify_outbox_due key points to. */
export function outboxKeyOfDueKey(key: Deno.KvKey): ReturnType<typeof notifyOutboxKey> {
  const [, , orgId, type, subject] = key as ReturnType<typeof notifyOutboxDueKey>;
  return notifyOutboxKey(orgId, type, subject);
}
/** What was sent to an organization's channels, newest last. */
export const notifyLogKey = (
  orgId: string,
  at: number,
  id: string,
): ["notify_log", string, number, string] => ["notify_log", orgId, at, id];
/** Prefix of an organization's sent notifications. */
export const notifyLogPrefix = (orgId: string): ["notify_log", string] => ["notify_log", orgId];
/** A summary period (`daily:YYYY-MM-DD`, `weekly:YYYY-MM-DD`) already queued for an organization. */
export const notifySummaryKey = (
  orgId: string,
  period: string,
): ["notify_summaries", string, string] => ["notify_summaries", orgId, period];

/** A notification address's confirmation link, by the SHA-256 of its token. */
export const notifyConfirmTokenKey = (tokenHash: string): ["notify_confirm_tokens", string] => [
  "notify_confirm_tokens",
  tokenHash,
];

// What each family names, so that deleting an organization finds all it owns.

/** The kinds of id a key or a value names. */
export type IdKind = "org" | "form" | "destination" | "submission" | "tenantKey" | "publicKey";

/**
 * What a family's entries name: `key` by position (1 is the part after the family's
 * name), `value` by field (a stored tuple's fields are its indexes); `defines` the kinds
 * whose ids its matching entries give (a form's destinations, a job's submission), so that
 * deletion learns them. Null: the family names no organization (its entries expire or are
 * the service's own).
 */
export interface FamilyNames {
  key: Partial<Record<number, IdKind>>;
  value?: Record<string, IdKind>;
  defines?: IdKind[];
}

/**
 * Every key family and what it names. A new family must be listed here (store/keys_test.ts
 * fails otherwise): deleting an organization (store/org_deletion.ts) walks this list.
 */
export const KEY_FAMILIES: Record<string, FamilyNames | null> = {
  orgs: { key: { 1: "org" } },
  tenant_keys_by_org: { key: { 1: "org", 2: "tenantKey" }, defines: ["tenantKey"] },
  // Revoked keys leave the index: their records are found by the organization they name.
  tenant_keys: { key: { 1: "tenantKey" }, value: { orgId: "org" } },
  forms_by_org: { key: { 1: "org", 2: "form" }, defines: ["form"] },
  forms: {
    key: { 1: "form" },
    value: { orgId: "org", publicKey: "publicKey" },
    defines: ["publicKey"],
  },
  forms_by_public_key: { key: { 1: "publicKey" } },
  destinations: { key: { 1: "form", 2: "destination" }, defines: ["destination"] },
  destination_failing: { key: { 1: "destination" } },
  // A stored job or retained failure is a tuple: [formId, orgId, …] (job_record.ts).
  jobs: {
    key: { 2: "submission", 3: "destination" },
    value: { 0: "form", 1: "org" },
    defines: ["submission"],
  },
  retained: {
    key: { 2: "submission", 3: "destination" },
    value: { 0: "form", 1: "org" },
    defines: ["submission"],
  },
  deliveries: { key: { 1: "form", 3: "submission", 4: "destination" }, defines: ["submission"] },
  envelopes: { key: { 2: "submission" } },
  envelope_checks: { key: { 2: "submission", 3: "destination" } },
  jobs_by_destination: { key: { 1: "destination", 3: "submission" } },
  retained_by_destination: { key: { 1: "destination", 3: "submission" } },
  rate: { key: { 1: "form" } },
  test_send_under_way: { key: { 1: "destination" } },
  test_send_buckets: { key: { 1: "org" } },
  process_shares: null,
  rate_processes: null,
  relay_usage: { key: { 1: "org" } },
  health: null,
  refusals: { key: { 1: "form" } },
  refused_origins: { key: { 1: "form" } },
  confirmation_sent: { key: { 1: "form" } },
  confirmation_hour: { key: { 1: "form" } },
  page_token_uses: { key: { 1: "form" } },
  notify_settings: { key: { 1: "org" } },
  notify_outbox: { key: { 1: "org" } },
  notify_last: { key: { 1: "org" } },
  notify_outbox_due: { key: { 2: "org" } },
  notify_jobs: { key: { 1: "org" } },
  notify_due: { key: { 2: "org" } },
  notify_log: { key: { 1: "org" } },
  notify_summaries: { key: { 1: "org" } },
  notify_confirm_tokens: { key: {}, value: { orgId: "org" } },
};
