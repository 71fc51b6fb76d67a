/**
 * The confirmation to the visitor, a form setting: an email to the address in a named
 * payload field saying their message arrived, in the tenant's own words. Since anyone
 * can type anyone's address into a form, its limits are what keep it from being a spam
 * cannon (docs/api.md, "Confirmation to the visitor"):
 *
 * - one per address per form per 24 hours, counted under a keyed hash of the address
 *   (store/confirmations.ts), and at most `maxPerHour` per form;
 * - no visitor-written text unless the tenant names fields to echo, each cut short and
 *   sent as plain text;
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

/** A valid address out of a payload's field, lower-cased, or null. */
export function visitorAddress(payload: unknown, field: string): string | null {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return null;
  const value = (payload as Record<string, unknown>)[field];
  if (typeof value !== "string" || value.length > 254) return null;
  const address = value.trim().toLowerCase();
  return z.email().safeParse(address).success ? address : null;
}

/** An address as outcomes and logs show it: `a***@example.com`. */
export function maskAddress(address: string): string {
  const at = address.lastIndexOf("@");
  return at < 1 ? "***" : `${address[0]}***${address.slice(at)}`;
}
