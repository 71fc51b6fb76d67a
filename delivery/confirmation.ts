/**
 * Attempting a confirmation job (rules/confirmation.ts): the job of a submission whose
 * destination is the form's confirmation setting, not a stored destination. It reads
 * the form's setting as it is now, takes the visitor's address from the envelope,
 * renders the tenant's words, counts toward the organization's outbound budget (the
 * platform relay's caps included) and sends through the relay the tenant chose. Its
 * failures are blamed on the submission: a confirmation never pauses a destination.
 *
 * @module
 */
import type { SmtpConfig } from "../connectors/smtp.ts";
import { buildConfirmationMessage } from "../connectors/smtp/confirmation_message.ts";
import { oneLine } from "../connectors/smtp/message.ts";
import { DeliveryError, type DeliveryReceipt, type MailSender } from "../connectors/types.ts";
import { maskAddress, MAX_ECHO_CHARS, visitorAddress } from "../rules/confirmation.ts";
import { cut, fieldText, renderPlaceholders } from "../rules/render.ts";
import type { Db } from "../store/db.ts";
import { getDestination } from "../store/destinations.ts";
import { openEnvelopeData, readEnvelopeData } from "../store/envelope.ts";
import { sealedPart } from "./unknown_key.ts";
import { type FormRecord, getFormById } from "../store/forms.ts";
import type { ClaimedJob } from "../store/job_record.ts";
import type { OutboundBudget } from "./outbound_budget.ts";

/** What an attempt at a confirmation came to (one of attempt.ts's AttemptResults). */
export type ConfirmationResult =
  | { delivered: true; receipt: DeliveryReceipt }
  | { delivered: false; deferred: { until: number; reason: string } };

/** A permanent failure of this confirmation alone. */
function refused(message: string): DeliveryError {
  return new DeliveryError(message, { permanent: true, blame: "submission" });
}

/** Attempts confirmation jobs; failures throw DeliveryErrors (attempt.ts classifies them). */
export function createConfirmationAttempt(
  /** `mail`: the SMTP connector's mail sending (Connector.mail). */
  deps: { db: Db; mail: MailSender | undefined; outbound?: OutboundBudget },
): (claimed: ClaimedJob, signal: AbortSignal) => Promise<ConfirmationResult> {
  const { db, mail, outbound } = deps;

  /** The relay config the setting names: the platform's, or one of the form's SMTP destinations. */
  async function relayOf(form: FormRecord, via: string, to: string): Promise<SmtpConfig> {
    if (via === "platform") return { to: [to], subjectTemplate: "-" };
    const destination = await sealedPart("destination", () => getDestination(db, form.id, via));
    const config = destination?.config as Record<string, unknown> | undefined;
    if (destination?.type !== "smtp" || typeof config?.host !== "string") {
      throw refused("The confirmation's SMTP destination is gone or has no relay of its own");
    }
    return { ...config, to: [to] } as SmtpConfig;
  }

  return async function attempt(claimed, signal) {
    // Only where the connectors were replaced by ones that send no mail (tests).
    if (mail === undefined) throw refused("This service's connectors send no email");
    const { job } = claimed;
    const form = await getFormById(db, job.formId);
    const settings = form?.confirmation;
    if (!form || !settings) throw refused("The confirmation was turned off before delivery");
    const data = await readEnvelopeData(db, claimed);
    if (data === null) throw refused("Submission data expired before delivery");
    const envelope = await sealedPart(
      "envelope",
      () => openEnvelopeData(db.sealer, job.submissionId, data),
    );
    const to = visitorAddress(envelope.payload, settings.emailField);
    if (to === null) throw refused("The visitor's address is no longer valid");
    const config = await relayOf(form, settings.via, to);
    if (outbound) {
      const request = outbound.requestOf({ type: "smtp", config }, {
        orgId: job.orgId,
        bytes: settings.text.length + 1000,
      });
      const answer = await outbound.take(request, Date.now());
      if (!answer.ok) {
        return { delivered: false, deferred: { until: answer.retryAt, reason: answer.reason } };
      }
    }
    // Only the fields the tenant named: nothing else a visitor wrote reaches the mail. Each
    // on one line wherever it appears (subject, text, the list under it): a visitor's line
    // breaks would draw lines of their own, such as a "Bcc:" that reads like a header.
    const payload = (envelope.payload ?? {}) as Record<string, unknown>;
    const fields: Record<string, string> = {};
    for (const name of settings.echoFields) {
      if (Object.hasOwn(payload, name)) fields[name] = oneLine(fieldText(payload[name]));
    }
    const values = {
      formName: envelope.formName,
      submissionId: envelope.submissionId,
      submittedAt: envelope.metadata.submittedAt,
      // A bot chooses its Origin header: never in a confirmation.
      origin: null,
      fields,
      maxFieldChars: MAX_ECHO_CHARS,
    };
    let receipt: DeliveryReceipt;
    try {
      receipt = await mail.sendMail(config, {
        build: (route) =>
          buildConfirmationMessage({
            formId: form.id,
            submissionId: envelope.submissionId,
            from: route.from,
            platform: settings.via === "platform",
            to,
            replyTo: settings.replyTo ?? null,
            subject: renderPlaceholders(settings.subject, values),
            text: renderPlaceholders(settings.text, values),
            echoed: Object.entries(fields).map((
              [name, value],
            ) => [name, cut(value, MAX_ECHO_CHARS)]),
          }),
        signal,
      });
    } catch (error) {
      if (!(error instanceof DeliveryError)) throw error;
      // The relay's or the address's trouble is this confirmation's, never a destination's.
      const message = error.message.replaceAll(to, maskAddress(to));
      throw new DeliveryError(`Confirmation to ${maskAddress(to)}: ${message}`, {
        permanent: error.permanent,
        blame: "submission",
        statusCode: error.statusCode,
        cause: error,
      });
    }
    const detail = `Confirmation to ${maskAddress(to)}`;
    return {
      delivered: true,
      receipt: {
        ...receipt,
        detail: receipt.detail
          ? `${detail}; ${receipt.detail.replaceAll(to, maskAddress(to))}`
          : detail,
      },
    };
  };
}
