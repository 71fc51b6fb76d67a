import { z } from "zod";
import {
  type HttpConnectorDeps,
  jsonRequestHeaders,
  settleResponse,
  startAttempt,
} from "./http.ts";
import {
  type DestinationDescriptor,
  httpTarget,
  redactSecrets,
  type SecretKind,
  urlHosts,
} from "./descriptor.ts";
import type { Connector } from "./types.ts";
import {
  previousSecretsSchema,
  signatureHeader,
  webhookSecret,
  withoutPreviousSecrets,
} from "./signing.ts";

/** Webhook destination config (spec 2.3, plus the contract's optional `secret`). */
export const webhookConfigSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  method: z.enum(["POST", "PUT", "PATCH"]).default("POST"),
  headers: z.record(
    z.string().regex(
      /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/,
      "A header name can have only letters, digits and !#$%&'*+.^_`|~-",
    ),
    z.string().regex(/^[^\r\n\0]*$/, "A header value cannot contain line breaks"),
  ).default({}),
  secret: webhookSecret.optional(),
});

/** A stored webhook config: as accepted, plus the earlier secrets a rotation keeps signing. */
export const storedWebhookConfigSchema = webhookConfigSchema.extend({
  previousSecrets: previousSecretsSchema.optional(),
});

export type WebhookConfig = z.infer<typeof storedWebhookConfigSchema>;

const WEBHOOK_SECRETS: Record<string, SecretKind> = {
  url: "url",
  headers: "headerValues",
  secret: "value",
};

/** The webhook destination type. */
export const webhookDestination: DestinationDescriptor<WebhookConfig, "webhook"> = {
  type: "webhook",
  label: "Webhook",
  group: "http",
  docSchema: webhookConfigSchema,
  target: httpTarget,
  hosts: urlHosts,
  preview: (envelope) => envelope,
  secrets: WEBHOOK_SECRETS,
  rotatableSecret: true,
  editors: [{
    kind: "webhook",
    label: "Webhook",
    where: "Any HTTPS endpoint that takes the submission envelope as JSON.",
    fields: [
      { name: "url", label: "URL", kind: "url" },
      { name: "method", label: "Method", kind: "select", options: ["POST", "PUT", "PATCH"] },
      {
        name: "headers",
        label: "Headers",
        kind: "headers",
        help: 'One "Name: value" per line, sent with every delivery.',
      },
      {
        name: "secret",
        label: "Signing secret (Standard Webhooks)",
        kind: "secret",
        optional: true,
        generate: "whsec",
        help:
          'Optional: "whsec_" and base64. Deliveries are then signed (webhook-signature header).',
      },
    ],
  }],
  create: (deps) => createWebhookConnector(deps.http),
};

/**
 * The webhook connector: the envelope as JSON with `config.method` and
 * `config.headers`, a `webhook-id` that is stable across retries and, with a
 * secret, Standard Webhooks `webhook-timestamp` and `webhook-signature` (signed with the
 * earlier secrets still in their grace too: signing.ts).
 * Redirects are failures (Standard Webhooks).
 */
export function createWebhookConnector(deps: HttpConnectorDeps): Connector<WebhookConfig> {
  /** Posts `data` as the JSON body: a submission's envelope, or a notice's event. */
  async function post(config: WebhookConfig, data: unknown, id: string, signal: AbortSignal) {
    const url = new URL(config.url);
    const body = JSON.stringify(data);
    const headers = jsonRequestHeaders(config.headers);
    headers["webhook-id"] = id;
    if (config.secret !== undefined) {
      const now = Date.now();
      const timestamp = Math.floor(now / 1000).toString();
      headers["webhook-timestamp"] = timestamp;
      headers["webhook-signature"] = (await signatureHeader(config, {
        content: `${id}.${timestamp}.${body}`,
        now,
      }))!;
    }
    const send = startAttempt(deps, signal);
    const response = await send(url, { method: config.method, headers, body });
    const redirected = response.status >= 300 && response.status < 400;
    return await settleResponse(
      url,
      response,
      redirected ? "redirects are not followed" : undefined,
    );
  }
  return {
    configSchema: webhookConfigSchema,
    storedConfigSchema: storedWebhookConfigSchema,
    redact: (config) => redactSecrets(withoutPreviousSecrets(config), WEBHOOK_SECRETS),
    deliver: ({ envelope, config, deliveryId, signal }) =>
      post(config, envelope, deliveryId, signal),
    // The operational webhook: the event's data, signed the same way.
    notice: {
      sendNotice: (config, { notice, id, signal }) => post(config, notice.data, id, signal),
    },
  };
}
