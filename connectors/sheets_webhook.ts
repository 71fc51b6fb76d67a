import { z } from "zod";
import {
  discardBody,
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

/** Spreadsheet script web app destination config (spec 2.3). */
export const sheetsWebhookConfigSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  method: z.enum(["POST", "PUT"]).default("POST"),
  authHeader: z.string().min(1).regex(/^[^\r\n\0]*$/, "The header cannot contain line breaks")
    .optional(),
});

export type SheetsWebhookConfig = z.infer<typeof sheetsWebhookConfigSchema>;

/** Redirect hops a delivery follows before it fails. */
export const MAX_REDIRECTS = 5;

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

const SHEETS_SECRETS: Record<string, SecretKind> = { url: "url", authHeader: "value" };

/** The spreadsheet script web app destination type. */
export const sheetsWebhookDestination: DestinationDescriptor<
  SheetsWebhookConfig,
  "sheets_webhook"
> = {
  type: "sheets_webhook",
  label: "Spreadsheet app",
  group: "http",
  docSchema: sheetsWebhookConfigSchema,
  target: httpTarget,
  hosts: urlHosts,
  preview: (envelope) => envelope,
  secrets: SHEETS_SECRETS,
  editors: [{
    kind: "sheets_webhook",
    label: "Spreadsheet app (e.g. Google Apps Script)",
    where: "In Apps Script: Deploy → New deployment → Web app, then copy its URL.",
    fields: [
      {
        name: "url",
        label: "Script web app URL",
        kind: "url",
        help: "The /exec address of the published script.",
      },
      { name: "method", label: "Method", kind: "select", options: ["POST", "PUT"] },
      {
        name: "authHeader",
        label: "Authorization header",
        kind: "secret",
        optional: true,
        help: "Optional, sent as Authorization.",
      },
    ],
  }],
  create: (deps) => createSheetsWebhookConnector(deps.http),
};

/**
 * The spreadsheet script web app connector: the envelope as JSON with
 * `config.method`, `Authorization` from `authHeader`, and redirects followed the
 * way a script web app needs (its POST answers 302 to a URL fetched with GET).
 * Every hop's host is checked, and none leads from https to http; success is a final 2xx.
 */
export function createSheetsWebhookConnector(
  deps: HttpConnectorDeps,
): Connector<SheetsWebhookConfig> {
  return {
    configSchema: sheetsWebhookConfigSchema,
    redact: (config) => redactSecrets(config, SHEETS_SECRETS),
    async deliver({ envelope, config, signal }) {
      const send = startAttempt(deps, signal);
      const headers = jsonRequestHeaders();
      if (config.authHeader !== undefined) headers.authorization = config.authHeader;
      let url = new URL(config.url);
      let method: string = config.method;
      let body: string | undefined = JSON.stringify(envelope);
      for (let hop = 0;; hop++) {
        const response = await send(url, { method, headers, body });
        if (!REDIRECT_STATUSES.has(response.status)) return await settleResponse(url, response);
        if (hop === MAX_REDIRECTS) {
          return await settleResponse(url, response, `more than ${MAX_REDIRECTS} redirects`);
        }
        const next = redirectTarget(url, response.headers.get("location"));
        if (typeof next === "string") return await settleResponse(url, response, next);
        await discardBody(response);
        // Credentials stay with the origin they were configured for (as fetch does).
        if (next.origin !== url.origin) delete headers.authorization;
        if (response.status <= 303) {
          method = "GET";
          body = undefined;
          delete headers["content-type"];
        }
        url = next;
      }
    },
  };
}

/** The URL a redirect leads to, or why it cannot be followed. */
function redirectTarget(from: URL, location: string | null): URL | string {
  if (location === null) return "no Location header";
  let target: URL;
  try {
    target = new URL(location, from);
  } catch {
    return "invalid Location header";
  }
  if (target.protocol !== "http:" && target.protocol !== "https:") {
    return `redirect to a "${target.protocol}" URL`;
  }
  // A 307 or 308 resends the whole envelope (and a 30x the next URL's query) in clear text.
  if (from.protocol === "https:" && target.protocol === "http:") {
    return "redirect from https to http";
  }
  return target;
}
