/**
 * The registry of destination types: one descriptor per type (connectors/descriptor.ts),
 * the one list the admin routes (validation), the connectors (connectors/mod.ts), the
 * API documentation, the console (served through `GET /deployment`), the store's
 * records, the CLI and the delivery engine derive from, the type names included. Adding
 * a type means writing its descriptor and listing it here.
 *
 * @module
 */
import {
  type ConsoleEditor,
  DESTINATION_GROUPS,
  type DestinationDescriptor,
  type DestinationTarget,
} from "./descriptor.ts";
import { discordDestination } from "./chat/discord.ts";
import { slackDestination } from "./chat/slack.ts";
import { teamsDestination } from "./chat/teams.ts";
import { telegramDestination } from "./chat/telegram.ts";
import { sheetsWebhookDestination } from "./sheets_webhook.ts";
import { smtpDestination } from "./smtp.ts";
import { webhookDestination } from "./webhook.ts";

export type { DestinationTarget } from "./descriptor.ts";

/**
 * Every destination type's descriptor, in the order the API lists the types (spec 1.7,
 * then the contract's additions): the one list of types.
 */
export const DESCRIPTORS = [
  webhookDestination,
  smtpDestination,
  sheetsWebhookDestination,
  slackDestination,
  discordDestination,
  teamsDestination,
  telegramDestination,
] as const;

/** A destination type. */
export type DestinationType = typeof DESCRIPTORS[number]["type"];

/** Every destination type, in the list's order. */
export const DESTINATION_TYPES: readonly DestinationType[] = DESCRIPTORS.map(({ type }) => type);

const BY_TYPE = new Map<string, DestinationDescriptor>(
  DESCRIPTORS.map((descriptor) => [descriptor.type, descriptor]),
);

/** The descriptor of a type. */
export function descriptorOf(type: DestinationType): DestinationDescriptor {
  const descriptor = BY_TYPE.get(type);
  // Unreachable while DestinationType is derived from the list.
  if (descriptor === undefined) throw new Error(`Unknown destination type "${type}"`);
  return descriptor;
}

/** Where a destination delivers; null for an unknown type or a config of unexpected shape. */
export function describeTarget(type: string, config: unknown): DestinationTarget | null {
  if (typeof config !== "object" || config === null) return null;
  const descriptor = BY_TYPE.get(type);
  return descriptor ? descriptor.target(config as Record<string, unknown>) : null;
}

/** What the console renders its editors from: each type's name, secrets and editors. */
export interface ConsoleDestinationType {
  type: DestinationType;
  label: string;
  secrets: string[];
  editors: ConsoleEditor[];
}

/**
 * Every type as the console needs it (part of the `GET /deployment` answer), in the
 * order a person picks types in: by group (the HTTP ones, email, then the chat
 * services), in the list's order within one.
 */
export function consoleDestinationTypes(): ConsoleDestinationType[] {
  return DESTINATION_GROUPS.flatMap((group) =>
    DESCRIPTORS.filter((descriptor) => descriptor.group === group)
  ).map(({ type, label, secrets, editors }) => ({
    type,
    label,
    secrets: Object.keys(secrets),
    editors,
  }));
}
