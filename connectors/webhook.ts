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

/** The key bytes of a `whsec_` secret: the base64 after the prefix; throws when not base64. */
function secretKey(secret: string): Uint8Array<ArrayBuffer> {
  return Uint8Array.fromBase64(secret.slice("whsec_".length));
}

/** Standard Webhooks signing secret: `whsec_` + base64 of at least 24 bytes. */
const webhookSecret = z.string().refine((value) => {
  if (!value.startsWith("whsec_")) return false;
  try {
    return secretKey(value).length >= 24;
  } catch {
    return false;
  }
}, 'Expected "whsec_" followed by at least 24 bytes in base64');

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

export type WebhookConfig = z.infer<typeof webhookConfigSchema>;

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
 * secret, Standard Webhooks `webhook-timestamp` and `webhook-signature`.
 * Redirects are failures (Standard Webhooks).
 */
export function createWebhookConnector(deps: HttpConnectorDeps): Connector<WebhookConfig> {
  return {
    configSchema: webhookConfigSchema,
    redact: (config) => redactSecrets(config, WEBHOOK_SECRETS),
    async deliver({ envelope, config, deliveryId, signal }) {
      const url = new URL(config.url);
      const body = JSON.stringify(envelope);
      const headers = jsonRequestHeaders(config.headers);
      headers["webhook-id"] = deliveryId;
      if (config.secret !== undefined) {
        const timestamp = Math.floor(Date.now() / 1000).toString();
        headers["webhook-timestamp"] = timestamp;
        headers["webhook-signature"] = await sign(
          config.secret,
          `${deliveryId}.${timestamp}.${body}`,
        );
      }
      const send = startAttempt(deps, signal);
      const response = await send(url, { method: config.method, headers, body });
      const redirected = response.status >= 300 && response.status < 400;
      return await settleResponse(
        url,
        response,
        redirected ? "redirects are not followed" : undefined,
      );
    },
  };
}

/**
 * A Standard Webhooks signature: `v1,` + base64 HMAC-SHA256 of `<id>.<timestamp>.<body>`,
 * keyed with the base64-decoded part of the secret after `whsec_`.
 */
async function sign(secret: string, content: string): Promise<string> {
  const key = await crypto.subtle.importKey(
    "raw",
    secretKey(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const data = new TextEncoder().encode(content);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, data));
  return `v1,${mac.toBase64()}`;
}
