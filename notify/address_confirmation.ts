/**
 * The message that confirms a notification email address, and sending it: the only
 * message an address gets before its link is followed. It goes through the mail
 * capability of the SMTP connector (as a visitor's confirmation does), through the
 * relay the organization chose for its notifications, within the organization's
 * outbound budget and so the platform relay's caps. Its words are formrelay's alone:
 * no organization name or other text a tenant chose, so the platform's sender never
 * carries a stranger's message to an address that did not ask for it.
 *
 * @module
 */
import type { SmtpConfig } from "../connectors/smtp.ts";
import {
  encodeQuotedPrintable,
  formatDate,
  type MailMessage,
  oneLine,
  stableMessageId,
  textHeader,
} from "../connectors/smtp/message.ts";
import type { MailSender } from "../connectors/types.ts";
import { DeliveryError } from "../connectors/types.ts";
import type { OutboundBudget } from "../delivery/outbound_budget.ts";
import { describeError, type Logger } from "../log.ts";
import { maskAddress } from "../rules/confirmation.ts";
import type { Db } from "../store/db.ts";
import { openDestinationConfig } from "../store/destinations.ts";
import { beginConfirmation, noteConfirmationError } from "../store/notify_confirmations.ts";
import type { NotificationSettings } from "../store/notifications.ts";
import { findOrgDestination } from "./channels.ts";

/** The path of a confirmation link's page (routes/notify_confirm.ts). */
export const CONFIRM_PATH = "/v1/notifications/confirm";

const CRLF = "\r\n";

/** The confirmation message to `to`, with its link. */
export function confirmationMessage(
  options: { from: string; to: string; link: string; date?: Date },
): MailMessage {
  const { from, to, link } = options;
  const domain = /^[A-Za-z0-9.-]+$/.test(from.split("@")[1] ?? "")
    ? from.split("@")[1]
    : "formrelay.invalid";
  const messageId = stableMessageId(link, "notification-address", domain);
  const headers = [
    `Date: ${formatDate(options.date ?? new Date())}`,
    `Message-ID: ${messageId}`,
    `From: formrelay <${oneLine(from)}>`,
    `To: ${oneLine(to)}`,
    textHeader("Subject", "Confirm this address for formrelay notifications"),
    "Auto-Submitted: auto-generated",
    "X-Auto-Response-Suppress: All",
    "MIME-Version: 1.0",
    "Content-Type: text/plain; charset=UTF-8",
    "Content-Transfer-Encoding: quoted-printable",
  ];
  const body = [
    "An organization on formrelay, a form relay service, asked to send its",
    "delivery notifications (failing destinations, submissions not",
    "delivered, summaries) to this address.",
    "",
    "Nothing will be sent here unless you confirm. To confirm, open this",
    "link and press the button on its page (the link alone changes nothing):",
    "",
    link,
    "",
    "The link works for 7 days. If you did not expect this message, ignore",
    "it: you will not be written to again.",
  ].join("\n");
  return {
    from,
    recipients: [to],
    data: headers.join(CRLF) + CRLF + CRLF + encodeQuotedPrintable(body + "\n"),
    messageId,
  };
}

/** What sending confirmations needs. */
export interface AddressConfirmationDeps {
  db: Db;
  /** The SMTP connector's mail sending (Connector.mail). */
  mail: MailSender | undefined;
  outbound: OutboundBudget;
  /** PUBLIC_URL's origin. */
  publicUrl: string | null;
  logger: Logger;
}

/** Sent, or why not (a refusal of the limits is the caller's to answer). */
export type ConfirmationSent =
  | { sent: true }
  | { sent: false; refused: "unknown" | "confirmed" }
  | { sent: false; refused: "limit"; retryAfterMs: number }
  | { sent: false; error: string };

/** Sends confirmation messages for one organization's addresses. */
export function createAddressConfirmations(deps: AddressConfirmationDeps) {
  const { db, mail, outbound, publicUrl, logger } = deps;

  /** The relay config the settings name, to one address. */
  async function relayOf(
    orgId: string,
    email: NonNullable<NotificationSettings["email"]>,
    to: string,
  ): Promise<SmtpConfig> {
    if (email.via === "platform") return { to: [to], subjectTemplate: "-" };
    const record = await findOrgDestination(db, orgId, email.via);
    if (record === null || record.type !== "smtp") {
      throw new DeliveryError("The SMTP destination to send through was deleted", {
        permanent: true,
      });
    }
    const config = await openDestinationConfig(db, record) as Record<string, unknown>;
    return { ...config, to: [to] } as SmtpConfig;
  }

  /** Sends a confirmation message to one of the organization's addresses (a new link). */
  async function send(
    orgId: string,
    email: NonNullable<NotificationSettings["email"]>,
    address: string,
  ): Promise<ConfirmationSent> {
    // Said where the owner looks (the address's state), not only in the answer.
    const unable = publicUrl === null
      ? "PUBLIC_URL is not set on this service"
      : mail === undefined
      ? "This service's connectors send no email"
      : null;
    if (unable !== null || mail === undefined) {
      const error = new DeliveryError(unable ?? "No mail", { permanent: true });
      return await failed(orgId, address, error);
    }
    const now = Date.now();
    let config: SmtpConfig;
    try {
      config = await relayOf(orgId, email, address);
    } catch (error) {
      return await failed(orgId, address, error);
    }
    // The address's own limits first, so a refused request takes nothing from the budgets.
    const begun = await beginConfirmation(db, { orgId, address, now });
    if ("refused" in begun) return { sent: false, ...begun };
    const budget = await outbound.take(
      outbound.requestOf({ type: "smtp", config }, { orgId, bytes: 2000 }),
      now,
    );
    if (!budget.ok) {
      await noteConfirmationError(db, { orgId, address, error: `Not sent: ${budget.reason}` });
      return { sent: false, refused: "limit", retryAfterMs: Math.max(1000, budget.retryAt - now) };
    }
    const link = `${publicUrl}${CONFIRM_PATH}?token=${begun.token}`;
    try {
      await mail.sendMail(config, {
        build: (route) => confirmationMessage({ from: route.from, to: address, link }),
        signal: new AbortController().signal,
      });
    } catch (error) {
      return await failed(orgId, address, error);
    }
    logger.info("notification address confirmation sent", { orgId, to: maskAddress(address) });
    return { sent: true };
  }

  async function failed(orgId: string, address: string, error: unknown) {
    // A DeliveryError's text is written for tenants; anything else stays in the log.
    const text = error instanceof DeliveryError
      ? error.message.replaceAll(address, maskAddress(address))
      : "Sending failed: internal error";
    if (!(error instanceof DeliveryError)) {
      logger.error("notification address confirmation failed", {
        orgId,
        error: describeError(error),
      });
    }
    await noteConfirmationError(db, { orgId, address, error: text });
    return { sent: false as const, error: text };
  }

  return { send };
}

/** The confirmations of one process. */
export type AddressConfirmations = ReturnType<typeof createAddressConfirmations>;
