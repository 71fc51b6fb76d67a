/**
 * The registry of destination types: one descriptor per type (connectors/descriptor.ts),
 * the one list the admin routes (validation), the connectors (connectors/mod.ts), the
 * API documentation, the console (served through `GET /deployment`), the store's
 * records, the CLI and the delivery engine derive from. Adding a type means writing its
 * descriptor and listing it here.
 *
 * @module
 */
import type { ConsoleEditor, DestinationDescriptor, DestinationTarget } from "./descriptor.ts";
import { discordDestination } from "./chat/discord.ts";
import { slackDestination } from "./chat/slack.ts";
import { teamsDestination } from "./chat/teams.ts";
import { telegramDestination } from "./chat/telegram.ts";
import { sheetsWebhookDestination } from "./sheets_webhook.ts";
import { smtpDestination } from "./smtp.ts";
import { webhookDestination } from "./webhook.ts";

export type { DestinationTarget } from "./descriptor.ts";

/** Every destination type (spec 1.7, then the contract's additions), in the order the API lists them. */
export const DESTINATION_TYPES = [
  "webhook",
  "smtp",
  "sheets_webhook",
  "slack",
  "discord",
  "teams",
  "telegram",
] as const;

/** A destination type. */
export type DestinationType = typeof DESTINATION_TYPES[number];

/** Each type's descriptor. */
export const DESCRIPTORS: Record<DestinationType, DestinationDescriptor> = {
  webhook: webhookDestination as DestinationDescriptor,
  smtp: smtpDestination as DestinationDescriptor,
  sheets_webhook: sheetsWebhookDestination as DestinationDescriptor,
  slack: slackDestination as DestinationDescriptor,
  discord: discordDestination as DestinationDescriptor,
  teams: teamsDestination as DestinationDescriptor,
  telegram: telegramDestination as DestinationDescriptor,
};

/** Where a destination delivers; null for an unknown type or a config of unexpected shape. */
export function describeTarget(type: string, config: unknown): DestinationTarget | null {
  if (typeof config !== "object" || config === null) return null;
  const descriptor = (DESCRIPTORS as Record<string, DestinationDescriptor | undefined>)[type];
  return descriptor ? descriptor.target(config as Record<string, unknown>) : null;
}

/** What the console renders its editors from: each type's name, secrets and editors. */
export interface ConsoleDestinationType {
  type: DestinationType;
  label: string;
  secrets: string[];
  editors: ConsoleEditor[];
}

/** The order a person picks types in: the HTTP ones, email, then the chat services. */
const CONSOLE_ORDER: readonly DestinationType[] = [
  "webhook",
  "sheets_webhook",
  "smtp",
  "slack",
  "discord",
  "teams",
  "telegram",
];

/** Every type as the console needs it (part of the `GET /deployment` answer). */
export function consoleDestinationTypes(): ConsoleDestinationType[] {
  return CONSOLE_ORDER.map((type) => {
    const { label, secrets, editors } = DESCRIPTORS[type];
    return { type, label, secrets: Object.keys(secrets), editors };
  });
}
