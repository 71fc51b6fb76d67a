/**
 * The confirmation to the visitor, a form setting: an email to the address in a named
 * payload field saying their message arrived, in the tenant's own words. Since anyone
 * can type anyone's address into a form, its limits are what keep it from being a spam
 * cannon (docs/api.md, "Confirmation to the visitor"):
 *
 * - one per mailbox per form per 24 hours, counted under a keyed hash of the mailbox
 *   (mailboxOf: `Victim+1@` and `victim@` are one; store/confirmations.ts), and at most
 *   `maxPerHour` per form;
 * - no visitor-written text unless the tenant names fields to echo, each cut short, on
 *   one line wherever it appears (subject, text, the echoed list) and sent as plain text;
 * - only for a submission that passed the form's captcha (a form with one refuses the
 *   others) and never for one the honeypot or a spam rule caught (those make no jobs);
 * - `Auto-Submitted: auto-replied` and the other headers RFC 3834 asks for;
 * - its own delivery job, retried and recorded like any other, never in the way of the
 *   form's own destinations.
 *
 * @module
 */
import { z } from "zod";

/** The destination id of a submission's confirmation job (not a stored destination). */
export const CONFIRMATION_DESTINATION_ID = "confirmation";
/** Longest echoed value; the rest is cut with an ellipsis. */
export const MAX_ECHO_CHARS = 200;

/** A form's confirmation settings. */
export const confirmationSchema = z.strictObject({
  /** The top-level payload field holding the visitor's address. */
  emailField: z.string().min(1).max(100),
  /** Subject, with `{{formName}}` (render.ts). */
  subject: z.string().trim().min(1).max(200),
  /** The tenant's text, with `{{formName}}` (render.ts). */
  text: z.string().trim().min(1).max(4000),
  /** Payload fields whose values are repeated under the text, cut and as plain text. */
  echoFields: z.array(z.string().min(1).max(100)).max(10).default([]),
  /** Reply-To of the confirmation (the tenant's address). */
  replyTo: z.email().max(254).optional(),
  /** `platform` (PLATFORM_SMTP_*) or the id of one of the form's SMTP destinations with its own relay. */
  via: z.string().min(1).max(100).default("platform"),
  /** Most confirmations the form sends in an hour. */
  maxPerHour: z.number().int().min(1).max(1000).default(20),
});

/** A form's confirmation settings. */
export type ConfirmationSettings = z.infer<typeof confirmationSchema>;

/**
 * A valid address out of a payload's field as it is sent, or null: lower case, its
 * domain in the IDNA ASCII form (`bücher.example` as `xn--bcher-kva.example`), so a
 * relay never sees a domain that is not ASCII. A local part that is not ASCII stays:
 * it needs a relay offering SMTPUTF8 (connectors/smtp/client.ts refuses it otherwise).
 */
export function visitorAddress(payload: unknown, field: string): string | null {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return null;
  const value = (payload as Record<string, unknown>)[field];
  if (typeof value !== "string" || value.length > 254) return null;
  const text = value.trim().normalize("NFC").toLowerCase();
  const at = text.lastIndexOf("@");
  const local = text.slice(0, at);
  const domain = asciiDomain(text.slice(at + 1));
  if (at < 1 || domain === null || !LOCAL_PART.test(local)) return null;
  if (new TextEncoder().encode(local).length > 64) return null;
  const address = `${local}@${domain}`;
  return address.length <= 254 ? address : null;
}

/**
 * Dot-separated words of letters, marks and digits of any script, `_`, `'`, `+` and `-`:
 * the ASCII characters z.email() allows, and what internationalized addresses hold.
 */
const LOCAL_PART = /^[\p{L}\p{M}\p{N}_'+-]+(?:\.[\p{L}\p{M}\p{N}_'+-]+)*$/u;
/** Characters a domain may be written with: letters, marks, digits, hyphens and full stops. */
const DOMAIN_TEXT = /^[\p{L}\p{M}\p{N}.\u3002\uff0e\uff61-]+$/u;
/** A host name of two labels or more, its top-level label letters (or an IDNA A-label). */
const ASCII_HOST =
  /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:[a-z]{2,63}|xn--[a-z0-9-]{1,59})$/;

/** A domain's IDNA ASCII form (UTS 46, as the URL parser maps host names), or null. */
function asciiDomain(domain: string): string | null {
  // Only host-name characters reach the URL parser: it would take a port, a path or user
  // information out of anything else, and drop tabs and line breaks without a word.
  if (!DOMAIN_TEXT.test(domain)) return null;
  let host: string;
  try {
    host = new URL(`http://${domain}`).hostname;
  } catch {
    return null;
  }
  return ASCII_HOST.test(host) ? host : null;
}

/** Domains that are another's other name (Gmail's): their mail is one mailbox. */
const DOMAIN_ALIASES = new Map([["googlemail.com", "gmail.com"]]);

/**
 * The mailbox an address (as visitorAddress gives it) reaches, as the once-a-day limit
 * counts it: case, the `+tag` sub-address and dots in the local part folded, and Gmail's
 * two domains as one, so `victim@`, `Victim+1@` and `v.ictim+x@` are one mailbox. `+tag`
 * is a sub-address at Gmail, Outlook, Fastmail, iCloud and most providers; dots are
 * ignored by Gmail and by Google Workspace, whose domains cannot be told by their name,
 * so they are folded for every domain. Two people whose addresses differ only so share
 * one confirmation a day: the limit errs on the side of the address's owner.
 */
export function mailboxOf(address: string): string {
  const at = address.lastIndexOf("@");
  const domain = address.slice(at + 1);
  const local = address.slice(0, at);
  const plus = local.indexOf("+");
  const base = plus > 0 ? local.slice(0, plus) : local;
  return `${base.replaceAll(".", "")}@${DOMAIN_ALIASES.get(domain) ?? domain}`;
}

/** An address as outcomes and logs show it: `a***@example.com`. */
export function maskAddress(address: string): string {
  const at = address.lastIndexOf("@");
  // The first character whole (a surrogate pair is one).
  return at < 1 ? "***" : `${String.fromCodePoint(address.codePointAt(0)!)}***${address.slice(at)}`;
}
