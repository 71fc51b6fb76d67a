/**
 * The registry of destination types: the one list that the admin routes (validation),
 * the connectors (connectors/mod.ts builds one per type), the store's records, the CLI
 * and the delivery engine derive from, and what each type's config says about where
 * it delivers. Adding a type means adding it here; the compiler then asks for its
 * connector and its target description.
 *
 * @module
 */
import { urlOrigin } from "../redact.ts";

/** Every destination type (spec 1.7), in the order the API lists them. */
export const DESTINATION_TYPES = ["webhook", "smtp", "sheets_webhook"] as const;

/** A destination type. */
export type DestinationType = typeof DESTINATION_TYPES[number];

/** Where a destination delivers, from an allow-list of its config's fields: never its secrets. */
export type DestinationTarget =
  | { method: string; url: string }
  | { relay: string; secureTransport?: string; to: string[] };

const text = (value: unknown) => typeof value === "string" ? value : String(value ?? "");

/** An HTTP destination's method and `scheme://host[:port]` (its path and query may hold secrets). */
function httpTarget(config: Record<string, unknown>): DestinationTarget {
  return { method: text(config.method ?? "POST"), url: urlOrigin(text(config.url)) };
}

/** An SMTP destination's relay (the platform's, or host and port) and recipients. */
function smtpTarget(config: Record<string, unknown>): DestinationTarget {
  const to = Array.isArray(config.to) ? config.to.map(text) : [];
  if (!("host" in config)) return { relay: "platform", to };
  return {
    relay: `${text(config.host)}:${text(config.port)}`,
    secureTransport: text(config.secureTransport ?? "starttls"),
    to,
  };
}

const TARGETS: Record<DestinationType, (config: Record<string, unknown>) => DestinationTarget> = {
  webhook: httpTarget,
  smtp: smtpTarget,
  sheets_webhook: httpTarget,
};

/** Where a destination delivers; null for an unknown type or a config of unexpected shape. */
export function describeTarget(type: string, config: unknown): DestinationTarget | null {
  if (typeof config !== "object" || config === null) return null;
  const target = (TARGETS as Record<string, typeof httpTarget | undefined>)[type];
  return target ? target(config as Record<string, unknown>) : null;
}
