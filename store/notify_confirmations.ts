/**
 * Notification email addresses are confirmed before anything else is sent to them: each
 * gets one message with a link, and is pending until the link's page is posted. The
 * state of each address lives in the organization's sealed settings
 * (`email.confirmations`, by lower-cased address); the link's token is random and only
 * its SHA-256 is kept (`notify_confirm_tokens/<sha256>`, naming the organization and a
 * keyed hash of the address, never the address), expiring after CONFIRMATION_TTL_MS.
 * Removing an address forgets its state and its token; adding it again starts over.
 *
 * @module
 */
import { type Db, retryAtomic } from "./db.ts";
import { notifyConfirmTokenKey } from "./keys.ts";
import {
  type AddressConfirmation,
  type NotificationSettings,
  readNotificationSettingsEntry,
  setNotificationSettings,
} from "./notifications.ts";
import { sha256Hex } from "./sealing.ts";

/** How long a confirmation link is good for. */
export const CONFIRMATION_TTL_MS = 7 * 24 * 3600 * 1000;
/** Confirmation messages per address per day at most, the first one included. */
export const MAX_CONFIRMATIONS_PER_DAY = 3;
/** The least time between two confirmation messages to one address. */
export const MIN_RESEND_MS = 60_000;
const DAY_MS = 24 * 3600 * 1000;

/** A token's record. */
interface TokenRecord {
  orgId: string;
  /** A keyed hash of the lower-cased address. */
  address: string;
  expiresAt: number;
}

/** The form an address is kept and compared in. */
export function addressId(address: string): string {
  return address.trim().toLowerCase();
}

/** An address's state, pending with nothing sent when unknown. */
export function confirmationOf(
  email: NotificationSettings["email"],
  address: string,
): AddressConfirmation {
  return email?.confirmations?.[addressId(address)] ??
    { confirmedAt: null, sent: [], tokenHash: null, error: null };
}

/** The addresses of `email` that were confirmed: the only ones notifications go to. */
export function confirmedAddresses(email: NotificationSettings["email"]): string[] {
  if (email === null) return [];
  return email.to.filter((address) => confirmationOf(email, address).confirmedAt !== null);
}

/**
 * Stores settings given by the tenant (their addresses' states are the service's): the
 * states of addresses kept are carried over, new addresses start pending, and removed
 * ones are forgotten with their tokens. Checked against the settings read, so a link
 * followed meanwhile is not lost. Returns what was stored and the addresses added.
 */
export async function saveNotificationSettings(
  db: Db,
  orgId: string,
  given: NotificationSettings,
): Promise<{ settings: NotificationSettings; added: string[] }> {
  return await retryAtomic(async () => {
    const { entry, settings: before } = await readNotificationSettingsEntry(db, orgId);
    const op = db.kv.atomic().check(entry);
    const kept = new Map<string, AddressConfirmation>();
    const added: string[] = [];
    let email: NotificationSettings["email"] = null;
    if (given.email !== null) {
      const to = [...new Map(given.email.to.map((a) => [addressId(a), a.trim()])).values()];
      for (const address of to) {
        const previous = before?.email?.confirmations?.[addressId(address)];
        if (previous === undefined) added.push(address);
        kept.set(addressId(address), previous ?? confirmationOf(null, address));
      }
      email = { to, via: given.email.via, confirmations: Object.fromEntries(kept) };
    }
    for (const [id, state] of Object.entries(before?.email?.confirmations ?? {})) {
      if (!kept.has(id) && state.tokenHash !== null) {
        op.delete(notifyConfirmTokenKey(state.tokenHash));
      }
    }
    const settings = { ...given, email };
    await setNotificationSettings(db, op, orgId, settings);
    return { op, result: { settings, added } };
  });
}

/** Why a confirmation message cannot be sent now. */
export type ConfirmationRefusal =
  | { refused: "unknown" | "confirmed" }
  | { refused: "limit"; retryAfterMs: number };

/**
 * Starts a confirmation of one of the organization's addresses: a new token (the one
 * sent before stops working), counted against the address's limits. Returns the token
 * to put in the link, or why not.
 */
export async function beginConfirmation(
  db: Db,
  options: { orgId: string; address: string; now: number },
): Promise<{ token: string } | ConfirmationRefusal> {
  const { orgId, address, now } = options;
  const id = addressId(address);
  const token = crypto.getRandomValues(new Uint8Array(32)).toBase64({
    alphabet: "base64url",
    omitPadding: true,
  });
  const tokenHash = await sha256Hex(token);
  return await retryAtomic<{ token: string } | ConfirmationRefusal>(async () => {
    const { entry, settings } = await readNotificationSettingsEntry(db, orgId);
    const state = settings?.email?.confirmations?.[id];
    if (settings?.email == null || state === undefined) {
      return { op: null, result: { refused: "unknown" } };
    }
    if (state.confirmedAt !== null) return { op: null, result: { refused: "confirmed" } };
    const sent = state.sent.filter((at) => at > now - DAY_MS);
    const waitMs = Math.max(
      sent.length >= MAX_CONFIRMATIONS_PER_DAY ? sent[0] + DAY_MS - now : 0,
      sent.length > 0 ? sent.at(-1)! + MIN_RESEND_MS - now : 0,
    );
    if (waitMs > 0) return { op: null, result: { refused: "limit", retryAfterMs: waitMs } };
    const op = db.kv.atomic().check(entry);
    if (state.tokenHash !== null) op.delete(notifyConfirmTokenKey(state.tokenHash));
    const record: TokenRecord = {
      orgId,
      address: db.sealer.pseudonym(`notify-address\0${id}`),
      expiresAt: now + CONFIRMATION_TTL_MS,
    };
    op.set(notifyConfirmTokenKey(tokenHash), record, { expireIn: CONFIRMATION_TTL_MS });
    const next: AddressConfirmation = { ...state, sent: [...sent, now], tokenHash, error: null };
    const email = {
      ...settings.email,
      confirmations: { ...settings.email.confirmations, [id]: next },
    };
    await setNotificationSettings(db, op, orgId, { ...settings, email });
    return { op, result: { token } };
  });
}

/** Notes why an address's confirmation message could not be sent (shown to the owner). */
export async function noteConfirmationError(
  db: Db,
  options: { orgId: string; address: string; error: string },
): Promise<void> {
  const id = addressId(options.address);
  await retryAtomic(async () => {
    const { entry, settings } = await readNotificationSettingsEntry(db, options.orgId);
    const state = settings?.email?.confirmations?.[id];
    if (settings?.email == null || state === undefined) return { op: null, result: undefined };
    const next = { ...state, error: options.error };
    const email = {
      ...settings.email,
      confirmations: { ...settings.email.confirmations, [id]: next },
    };
    const op = db.kv.atomic().check(entry);
    await setNotificationSettings(db, op, options.orgId, { ...settings, email });
    return { op, result: undefined };
  });
}

/** The address a good token is for (nothing changed), or null. */
export async function addressOfToken(
  db: Db,
  token: string,
  now: number,
): Promise<{ orgId: string; address: string } | null> {
  const found = await findToken(db, token, now);
  return found === null ? null : { orgId: found.orgId, address: found.address };
}

/**
 * Confirms the address a token is for; the address, or null when the token is unknown,
 * expired, replaced by a newer one or its address removed.
 */
export async function confirmByToken(
  db: Db,
  token: string,
  now: number,
): Promise<{ orgId: string; address: string } | null> {
  return await retryAtomic(async () => {
    const found = await findToken(db, token, now);
    if (found === null) return { op: null, result: null };
    const { orgId, address, entry, settings, tokenEntry } = found;
    const id = addressId(address);
    const state = settings.email!.confirmations![id];
    const next: AddressConfirmation = { ...state, confirmedAt: now, tokenHash: null, error: null };
    const email = {
      ...settings.email!,
      confirmations: { ...settings.email!.confirmations, [id]: next },
    };
    const op = db.kv.atomic().check(entry).check(tokenEntry).delete(tokenEntry.key);
    await setNotificationSettings(db, op, orgId, { ...settings, email });
    return { op, result: { orgId, address } };
  });
}

/** A token's record and the address of the settings it still stands for, or null. */
async function findToken(db: Db, token: string, now: number) {
  if (!/^[A-Za-z0-9_-]{43}$/.test(token)) return null;
  const tokenHash = await sha256Hex(token);
  const tokenEntry = await db.kv.get<TokenRecord>(notifyConfirmTokenKey(tokenHash));
  const record = tokenEntry.value;
  if (record === null || record.expiresAt <= now) return null;
  const { entry, settings } = await readNotificationSettingsEntry(db, record.orgId);
  const address = settings?.email?.to.find((candidate) =>
    db.sealer.pseudonym(`notify-address\0${addressId(candidate)}`) === record.address
  );
  if (settings === null || address === undefined) return null;
  if (confirmationOf(settings.email, address).tokenHash !== tokenHash) return null;
  return { orgId: record.orgId, address, entry, settings, tokenEntry };
}
