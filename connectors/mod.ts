/**
 * The connectors of every destination type (connectors/registry.ts lists the types),
 * built from the configuration with the outbound guard, closable as a whole.
 *
 * @module
 */
import type { Config } from "../config.ts";
import { createHttpTransport } from "./http_transport.ts";
import { createOutboundGuard } from "./outbound_guard.ts";
import type { DestinationType } from "./registry.ts";
import { createSheetsWebhookConnector } from "./sheets_webhook.ts";
import { createSmtpConnector } from "./smtp.ts";
import type { Connector } from "./types.ts";
import { createWebhookConnector } from "./webhook.ts";

/** The connectors of every destination type, closable as a whole. */
export type Connectors = Record<DestinationType, Connector> & { close(): void };

/** Builds every connector from the configuration. */
export function createConnectors(config: Config, options: { caCerts?: string[] } = {}): Connectors {
  const guard = createOutboundGuard({ allowPrivate: config.allowPrivateDestinations });
  const transport = createHttpTransport(guard, { caCerts: options.caCerts });
  const http = { timeoutMs: config.httpTimeoutMs, transport };
  const smtp = createSmtpConnector({
    platform: config.platformSmtp,
    maxPlatformRecipients: config.relayLimits.maxRecipients,
    heloName: config.smtpHeloName,
    timeoutMs: config.smtpTimeoutMs,
    caCerts: options.caCerts,
    guard,
  });
  return {
    webhook: createWebhookConnector(http) as Connector,
    sheets_webhook: createSheetsWebhookConnector(http) as Connector,
    smtp: smtp as Connector,
    close: () => {
      smtp.close();
      transport.close();
    },
  };
}
