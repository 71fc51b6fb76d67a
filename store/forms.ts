/**
 * Forms: the record (captcha secret sealed), its two indexes (by organization, by
 * public key) written in the same commit, and updates and deletion (with the form's
 * destinations). Every write moves db.formVersion on, so caches drop the old form.
 *
 * @module
 */
import { type Db, retryAtomic } from "./db.ts";
import {
  destinationsOfFormPrefix,
  formByOrgKey,
  formByPublicKeyKey,
  formIdOfByOrgKey,
  formKey,
  formsByOrgPrefix,
} from "./keys.ts";
import { newKey, openJson, sealJson } from "./sealing.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { deleteKeysNaming } from "./org_deletion.ts";
import type { SpamRules } from "../rules/spam.ts";
import type { ConfirmationSettings } from "../rules/confirmation.ts";

/** A form as stored; the captcha secret only sealed. */
export interface FormRecord {
  id: string;
  orgId: string;
  name: string;
  publicKey: string;
  allowedOrigins: string[];
  verifyCaptcha: boolean;
  sealedCaptchaSecret: string | null;
  enabled: boolean;
  honeypotField: string | null;
  redirectUrl: string | null;
  /** Spam rules (rules/spam.ts); absent or null: none. */
  spamRules?: SpamRules | null;
  /** The confirmation to the visitor (rules/confirmation.ts); absent or null: none. */
  confirmation?: ConfirmationSettings | null;
  createdAt: string;
  updatedAt: string;
}

/** The settings a tenant gives a form. */
export interface FormSettings {
  name: string;
  allowedOrigins: string[];
  verifyCaptcha: boolean;
  /** undefined keeps the stored secret; null removes it. */
  captchaSecret?: string | null;
  enabled: boolean;
  honeypotField: string | null;
  redirectUrl: string | null;
  spamRules?: SpamRules | null;
  confirmation?: ConfirmationSettings | null;
}

async function sealCaptchaSecret(db: Db, formId: string, secret: string | null | undefined) {
  return secret == null ? null : await sealJson(db.sealer, secret, `form:${formId}`);
}

/** Creates a form with a new public key; record and both indexes in one commit. */
export async function createForm(
  db: Db,
  orgId: string,
  settings: FormSettings,
): Promise<FormRecord> {
  const id = crypto.randomUUID();
  const now = new Date().toISOString();
  const { captchaSecret, ...rest } = settings;
  const form: FormRecord = {
    ...rest,
    id,
    orgId,
    publicKey: newKey("pk"),
    sealedCaptchaSecret: await sealCaptchaSecret(db, id, captchaSecret),
    createdAt: now,
    updatedAt: now,
  };
  const op = db.kv.atomic()
    .check({ key: formKey(id), versionstamp: null })
    .check({ key: formByPublicKeyKey(form.publicKey), versionstamp: null })
    .set(formKey(id), form)
    .set(formByOrgKey(orgId, id), null)
    .set(formByPublicKeyKey(form.publicKey), id);
  const commit = await retryWhileBusy(() => op.commit());
  if (!commit.ok) throw new Error("Cannot create form: key collision, try again");
  return form;
}

/** A form by its id whichever its organization, or null (for the delivery engine). */
export async function getFormById(db: Db, formId: string): Promise<FormRecord | null> {
  return (await db.kv.get<FormRecord>(formKey(formId))).value;
}

/** A form of the given organization, or null (another org's form is not found either). */
export async function getForm(db: Db, orgId: string, formId: string): Promise<FormRecord | null> {
  const form = (await db.kv.get<FormRecord>(formKey(formId))).value;
  return form !== null && form.orgId === orgId ? form : null;
}

/** The forms of an organization, oldest first. */
export async function listForms(db: Db, orgId: string): Promise<FormRecord[]> {
  const ids: string[] = [];
  for await (const entry of db.kv.list({ prefix: formsByOrgPrefix(orgId) })) {
    ids.push(formIdOfByOrgKey(entry.key));
  }
  const forms: FormRecord[] = [];
  // getMany takes at most 10 keys.
  for (let i = 0; i < ids.length; i += 10) {
    const entries = await db.kv.getMany<FormRecord[]>(ids.slice(i, i + 10).map(formKey));
    for (const entry of entries) if (entry.value !== null) forms.push(entry.value);
  }
  return forms.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}

/** The form behind a public key, enabled or not. */
export async function getFormByPublicKey(db: Db, publicKey: string): Promise<FormRecord | null> {
  const formId = (await db.kv.get<string>(formByPublicKeyKey(publicKey))).value;
  return formId === null ? null : (await db.kv.get<FormRecord>(formKey(formId))).value;
}

/** Applies new settings to a form of the organization; null when not found. */
export async function updateForm(
  db: Db,
  orgId: string,
  formId: string,
  change: (form: FormRecord) => FormSettings,
): Promise<FormRecord | null> {
  const result = await retryAtomic(async () => {
    const entry = await db.kv.get<FormRecord>(formKey(formId));
    if (entry.value === null || entry.value.orgId !== orgId) return { op: null, result: null };
    const { captchaSecret, ...settings } = change(entry.value);
    const form: FormRecord = {
      ...entry.value,
      ...settings,
      sealedCaptchaSecret: captchaSecret === undefined
        ? entry.value.sealedCaptchaSecret
        : await sealCaptchaSecret(db, formId, captchaSecret),
      updatedAt: new Date().toISOString(),
    };
    return { op: db.kv.atomic().check(entry).set(formKey(formId), form), result: form };
  });
  db.formVersion.bump();
  return result;
}

/**
 * Deletes a form: first, in one commit, the form, its indexes and destinations (it is
 * gone for ingestion and the admin API from then on); then everything else that names
 * it, its destinations or its submissions (org_deletion.ts deleteKeysNaming): waiting
 * jobs and their envelopes, retained failures, delivery records, refusal counts and
 * refused sites, rate counts, confirmation records, page-token uses, health records.
 * False when not found.
 */
export async function deleteForm(db: Db, orgId: string, formId: string): Promise<boolean> {
  const deleted = await retryAtomic(async () => {
    const entry = await db.kv.get<FormRecord>(formKey(formId));
    if (entry.value === null || entry.value.orgId !== orgId) return { op: null, result: null };
    const op = db.kv.atomic().check(entry)
      .delete(formKey(formId))
      .delete(formByOrgKey(orgId, formId))
      .delete(formByPublicKeyKey(entry.value.publicKey));
    const destinationIds: string[] = [];
    for await (const dest of db.kv.list({ prefix: destinationsOfFormPrefix(formId) })) {
      op.delete(dest.key);
      destinationIds.push(dest.key[2] as string);
    }
    return { op, result: { publicKey: entry.value.publicKey, destinationIds } };
  });
  db.formVersion.bump();
  if (deleted === null) return false;
  await deleteKeysNaming(db, {
    form: [formId],
    destination: deleted.destinationIds,
    publicKey: [deleted.publicKey],
  });
  return true;
}

/** The plaintext captcha secret of a form, or null. */
export async function openCaptchaSecret(db: Db, form: FormRecord): Promise<string | null> {
  if (form.sealedCaptchaSecret === null) return null;
  return await openJson<string>(db.sealer, form.sealedCaptchaSecret, `form:${form.id}`);
}
