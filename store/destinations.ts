/**
 * Destinations: the record of each form's destinations with its whole config sealed,
 * its health (paused by the service, apart from the tenant's isEnabled), the per-form
 * limit, and updates (enabling or resuming clears a pause and the failing record).
 * Every write moves db.formVersion on, so caches drop the old record.
 *
 * @module
 */
import { type Db, retryAtomic } from "./db.ts";
import type { FormRecord } from "./forms.ts";
import {
  destinationFailingKey,
  destinationKey,
  destinationsOfFormPrefix,
  formKey,
} from "./keys.ts";
import { openJson, sealJson } from "./sealing.ts";
import type { DestinationType } from "../connectors/registry.ts";
import type { Condition } from "../rules/routing.ts";

/** A destination as stored: its whole config sealed, since most configs carry secrets. */
export interface DestinationRecord {
  id: string;
  formId: string;
  orgId: string;
  type: DestinationType;
  /** The tenant's name for it ("Sales inbox"), telling two of one type apart; absent: none. */
  name?: string;
  sealedConfig: string;
  /** The tenant's switch: a disabled destination gets no jobs (spec 2.3). */
  isEnabled: boolean;
  /** The service's view: paused when it kept failing (destination_health.ts). */
  health: DestinationHealth;
  /** Routing: gets only submissions for which all hold (rules/routing.ts); absent: all. */
  conditions?: Condition[];
  createdAt: string;
  updatedAt: string;
}

/**
 * A destination's health: `paused` (with why and since when, an ISO time) after it
 * failed, by its own fault, for DESTINATION_PAUSE_AFTER_HOURS with no delivery in
 * between. A paused destination's jobs are held, not attempted, until it is resumed.
 */
export interface DestinationHealth {
  state: "healthy" | "paused";
  reason: string | null;
  since: string | null;
}

/** The health of a destination nobody paused. */
export const HEALTHY: DestinationHealth = { state: "healthy", reason: null, since: null };

/** A destination with its config opened. */
export type Destination = Omit<DestinationRecord, "sealedConfig"> & { config: unknown };

/** Destinations a form may have; keeps every per-submission commit within KV's limits. */
export const MAX_DESTINATIONS_PER_FORM = 20;

const sealContext = (destinationId: string) => `destination:${destinationId}`;

/** A destination record's config, opened (not validated). */
export function openDestinationConfig(db: Db, record: DestinationRecord): Promise<unknown> {
  return openJson(db.sealer, record.sealedConfig, sealContext(record.id));
}

async function openDestination(db: Db, record: DestinationRecord): Promise<Destination> {
  const { sealedConfig: _, ...rest } = record;
  return { ...rest, config: await openDestinationConfig(db, record) };
}

/** Thrown when a form already has MAX_DESTINATIONS_PER_FORM destinations. */
export class TooManyDestinationsError extends Error {
  override name = "TooManyDestinationsError";
}

/** Adds a destination to a form; null when the form is gone. */
export async function addDestination(
  db: Db,
  form: FormRecord,
  input: {
    type: DestinationType;
    name?: string;
    config: unknown;
    isEnabled: boolean;
    conditions?: Condition[];
  },
): Promise<Destination | null> {
  const id = crypto.randomUUID();
  const now = new Date().toISOString();
  const record: DestinationRecord = {
    id,
    formId: form.id,
    orgId: form.orgId,
    type: input.type,
    ...(input.name ? { name: input.name } : {}),
    sealedConfig: await sealJson(db.sealer, input.config, sealContext(id)),
    isEnabled: input.isEnabled,
    health: HEALTHY,
    ...(input.conditions?.length ? { conditions: input.conditions } : {}),
    createdAt: now,
    updatedAt: now,
  };
  const stored = await retryAtomic(async () => {
    const formEntry = await db.kv.get<FormRecord>(formKey(form.id));
    if (formEntry.value === null) return { op: null, result: false };
    const existing = await listDestinationRecords(db, form.id);
    if (existing.length >= MAX_DESTINATIONS_PER_FORM) {
      throw new TooManyDestinationsError(
        `A form can have at most ${MAX_DESTINATIONS_PER_FORM} destinations`,
      );
    }
    // Checking the form record guards against a concurrent delete of the form.
    const op = db.kv.atomic().check(formEntry)
      .check({ key: destinationKey(form.id, id), versionstamp: null })
      .set(destinationKey(form.id, id), record);
    return { op, result: true };
  });
  db.formVersion.bump();
  if (!stored) return null;
  const { sealedConfig: _, ...rest } = record;
  return { ...rest, config: input.config };
}

/** The stored destination records of a form, configs still sealed (the ingestion path). */
export async function listDestinationRecords(
  db: Db,
  formId: string,
): Promise<DestinationRecord[]> {
  const records: DestinationRecord[] = [];
  for await (
    const entry of db.kv.list<DestinationRecord>({ prefix: destinationsOfFormPrefix(formId) })
  ) {
    records.push(entry.value);
  }
  return records.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}

/** The destinations of a form with their configs opened. */
export async function listDestinations(db: Db, formId: string): Promise<Destination[]> {
  const records = await listDestinationRecords(db, formId);
  return await Promise.all(records.map((record) => openDestination(db, record)));
}

/** Whether a form's destination exists (its record read, its config left sealed). */
export async function destinationExists(
  db: Db,
  formId: string,
  destinationId: string,
): Promise<boolean> {
  return (await db.kv.get(destinationKey(formId, destinationId))).versionstamp !== null;
}

/** One destination of a form, or null. */
export async function getDestination(
  db: Db,
  formId: string,
  destinationId: string,
): Promise<Destination | null> {
  const record = (await db.kv.get<DestinationRecord>(destinationKey(formId, destinationId))).value;
  return record === null ? null : await openDestination(db, record);
}

/**
 * Changes a destination's config, enabled flag and/or health; null when not found.
 * Enabling (`isEnabled: true`) resumes a paused destination too; `resume` resumes it
 * alone. Either clears the failing record, so the pause span starts afresh.
 */
export async function updateDestination(
  db: Db,
  formId: string,
  destinationId: string,
  change: {
    config?: unknown;
    /** A new name; null removes it. */
    name?: string | null;
    isEnabled?: boolean;
    resume?: boolean;
    conditions?: Condition[];
  },
): Promise<Destination | null> {
  const key = destinationKey(formId, destinationId);
  const sealedConfig = change.config === undefined
    ? undefined
    : await sealJson(db.sealer, change.config, sealContext(destinationId));
  const record = await retryAtomic(async () => {
    const entry = await db.kv.get<DestinationRecord>(key);
    const current = entry.value;
    if (current === null) return { op: null, result: null };
    const resume = change.resume === true || change.isEnabled === true;
    const updated: DestinationRecord = {
      ...current,
      sealedConfig: sealedConfig ?? current.sealedConfig,
      isEnabled: change.isEnabled ?? current.isEnabled,
      health: resume ? HEALTHY : current.health,
      updatedAt: new Date().toISOString(),
    };
    if (change.conditions !== undefined) {
      if (change.conditions.length > 0) updated.conditions = change.conditions;
      else delete updated.conditions;
    }
    if (change.name === null) delete updated.name;
    else if (change.name !== undefined) updated.name = change.name;
    const op = db.kv.atomic().check(entry).set(key, updated);
    if (resume) op.delete(destinationFailingKey(destinationId));
    return { op, result: updated };
  });
  db.formVersion.bump();
  return record === null ? null : await openDestination(db, record);
}

/**
 * Rewrites a destination's config from its current one in one read-check-commit (a
 * concurrent write makes it read again, so no edit is lost): `edit` gets the destination
 * with its config opened and returns the new config and what to hand back, or throws to
 * refuse. Null when the destination is not found.
 */
export async function editDestinationConfig<T>(
  db: Db,
  formId: string,
  destinationId: string,
  edit: (destination: Destination) => { config: unknown; result: T },
): Promise<T | null> {
  const key = destinationKey(formId, destinationId);
  const result = await retryAtomic(async () => {
    const entry = await db.kv.get<DestinationRecord>(key);
    if (entry.value === null) return { op: null, result: null };
    const { config, result } = edit(await openDestination(db, entry.value));
    const updated: DestinationRecord = {
      ...entry.value,
      sealedConfig: await sealJson(db.sealer, config, sealContext(destinationId)),
      updatedAt: new Date().toISOString(),
    };
    return { op: db.kv.atomic().check(entry).set(key, updated), result: { value: result } };
  });
  db.formVersion.bump();
  return result === null ? null : result.value;
}

/** Deletes a destination; false when not found. */
export async function deleteDestination(
  db: Db,
  formId: string,
  destinationId: string,
): Promise<boolean> {
  const key = destinationKey(formId, destinationId);
  const deleted = await retryAtomic(async () => {
    const entry = await db.kv.get(key);
    if (entry.value === null) return { op: null, result: false };
    const op = db.kv.atomic().check(entry).delete(key)
      .delete(destinationFailingKey(destinationId));
    return { op, result: true };
  });
  db.formVersion.bump();
  return deleted;
}
