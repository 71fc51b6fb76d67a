/**
 * The one factory of the chat destination types (Slack, Discord, Teams, Telegram): a
 * type's descriptor (console editor, secrets, target, preview) and its connector
 * (common.ts createChatConnector: messages, digests, notices, answers) from one spec,
 * so each service's file holds only what is its own.
 *
 * @module
 */
import { z } from "zod";
import { templateSchema } from "../../template.ts";
import {
  type ConnectorDeps,
  type ConsoleField,
  type DestinationDescriptor,
  httpTarget,
  type SecretKind,
  urlHosts,
} from "../descriptor.ts";
import type { Connector } from "../types.ts";
import {
  CHAT_SECRETS,
  type ChatServiceSpec,
  createChatConnector,
  presentation,
  TEMPLATE_FIELD,
} from "./common.ts";

/** The config fields of a chat type posting to an incoming webhook URL. */
export const CHAT_WEBHOOK_FIELDS = {
  url: z.url({ protocol: /^https?$/ }),
  template: templateSchema.optional(),
};

/** What one chat type is made of. */
export interface ChatTypeSpec<C, T extends string>
  extends Omit<ChatServiceSpec<C>, "secrets" | "url"> {
  type: T;
  /** The service's name as people know it. */
  label: string;
  /** Where a config's messages go (the deployment's settings at hand). */
  url(config: C, deps: ConnectorDeps): URL;
  /** Its secret fields; default: the webhook URL (CHAT_SECRETS). */
  secrets?: Record<string, SecretKind>;
  /** Where it delivers and which hosts it names; default: its `url`'s. */
  target?: DestinationDescriptor["target"];
  hosts?: DestinationDescriptor["hosts"];
  /** The console editor: where to find what it asks, and its fields (the template follows). */
  where: string;
  fields: ConsoleField[];
}

/** A chat destination type's descriptor, its connector included. */
export function chatDestination<C, T extends string>(
  spec: ChatTypeSpec<C, T>,
): DestinationDescriptor<C, T> {
  const secrets = spec.secrets ?? CHAT_SECRETS;
  return {
    type: spec.type,
    label: spec.label,
    group: "chat",
    docSchema: spec.schema,
    target: spec.target ?? httpTarget,
    hosts: spec.hosts ?? urlHosts,
    secrets,
    preview: (envelope, config) => spec.message(envelope, presentation(config) as C),
    editors: [{
      kind: spec.type,
      label: spec.label,
      where: spec.where,
      fields: [...spec.fields, TEMPLATE_FIELD],
    }],
    create: (deps): Connector<C> =>
      createChatConnector<C>(deps.http, {
        ...spec,
        secrets,
        url: (config) => spec.url(config, deps),
      }),
  };
}
