/**
 * What a destination type is, in one descriptor (modelled on Hookdeck Outpost's
 * destregistry): the schema its API documentation shows, where a config delivers
 * (without secrets) and which hosts it names, which of its fields are secrets, how its
 * connector is built (with what it can do besides delivering: mail sending), and
 * what the console needs to render its editor (labels, kinds of input, a "where do I
 * get this" line), served to the console by `GET /deployment`. Each connector module
 * exports its descriptor; connectors/registry.ts lists them.
 *
 * The descriptor holds only the type's own config. Fields every destination has
 * (`isEnabled`, and whatever else applies to all types) live in routes/destinations.ts.
 *
 * @module
 */
import type { z } from "zod";
import type { Config } from "../config.ts";
import { redactUrlSecrets, urlOrigin } from "../redact.ts";
import type { HttpConnectorDeps } from "./http.ts";
import type { OutboundGuard } from "./outbound_guard.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { type Connector, REDACTED } from "./types.ts";

/** Where a destination delivers, from an allow-list of its config's fields: never its secrets. */
export type DestinationTarget =
  | { method: string; url: string }
  | { relay: string; secureTransport?: string; to: string[] };

/**
 * How a secret field is shown in admin answers: `value` as "********", `url` with its
 * query, userinfo and fragment values hidden (its path stays), `wholeUrl` as "********"
 * (its path is the credential), `headerValues` with every value hidden.
 */
export type SecretKind = "value" | "url" | "wholeUrl" | "headerValues";

/** What a connector factory may use from the deployment. */
export interface ConnectorDeps {
  config: Config;
  /** Attempt time-out and the guarded transport of HTTP connectors. */
  http: HttpConnectorDeps;
  guard: OutboundGuard;
  caCerts?: string[];
}

/** One input of a console editor. */
export interface ConsoleField {
  /** The config field it edits. */
  name: string;
  label: string;
  kind:
    | "url"
    | "text"
    | "email"
    | "number"
    | "select"
    | "secret"
    | "headers"
    | "list"
    | "template";
  /** One line under the input. */
  help?: string;
  /** A select's choices. */
  options?: string[];
  /** The value a new destination's input starts with. */
  initial?: string | number;
  /** Left out of the config when empty. */
  optional?: boolean;
  /** A button that fills the input with a fresh secret of this form. */
  generate?: "whsec";
  /** A number input's value is sent as a number when it looks like one (Telegram's chat id). */
  numeric?: boolean;
}

/** One editor a person picks from the "Add a destination" list. */
export interface ConsoleEditor {
  /** The editor's id; a type with one editor uses the type's name. */
  kind: string;
  /** What a person picks, in their words. */
  label: string;
  /** Where the values come from, in one line. */
  where?: string;
  fields: ConsoleField[];
  /** Tells editors of one type apart by a config field's presence. */
  when?: { has: string } | { lacks: string };
  /** Offered only when the deployment has it. */
  requires?: "platformRelay";
}

/**
 * What kind of service a type reaches, which the console groups its types by: HTTP
 * receivers, then email, then the chat services (DESTINATION_GROUPS' order).
 */
export type DestinationGroup = "http" | "email" | "chat";

/** The groups in the order a person picks types in. */
export const DESTINATION_GROUPS: readonly DestinationGroup[] = ["http", "email", "chat"];

/** A host a config connects to, and the config field that names it. */
export interface ConfigHost {
  /** The field, as a validation issue's path (`config.url`). */
  path: string;
  host: string;
}

/** A destination type in one place. */
export interface DestinationDescriptor<C = unknown, T extends string = string> {
  /** The name the API's `type` takes. */
  type: T;
  /** The type's name as people know it ("Slack"). */
  label: string;
  group: DestinationGroup;
  /** The config as the API documentation shows it (usually the validating schema). */
  docSchema: z.ZodType;
  /** Where a stored config delivers, for the CLI, the outbound budget and logs. */
  target(config: Record<string, unknown>): DestinationTarget;
  /**
   * The hosts a config names that the service connects to, for the private-address check
   * when it is saved (a host the deployment sets, such as Telegram's API, is not one).
   */
  hosts(config: Record<string, unknown>): ConfigHost[];
  /** Config fields that are secrets, and how admin answers show them. */
  secrets: Record<string, SecretKind>;
  /**
   * Its deliveries are signed with `config.secret` (Standard Webhooks), which the API
   * rotates with a grace period during which the earlier secret signs too (signing.ts).
   */
  rotatableSecret?: boolean;
  /** The console's editors of this type. */
  editors: ConsoleEditor[];
  /**
   * What the destination would receive for an envelope (the console's preview): the
   * service's message, or the envelope itself for HTTP types. Only the config's
   * presentation fields are read (its template, a sender name), so an editor's
   * unsaved values do.
   */
  preview(envelope: SubmissionEnvelope, config: Record<string, unknown>): unknown;
  /** Builds the type's connector; `onClose` registers what `Connectors.close()` ends. */
  create(deps: ConnectorDeps, onClose: (close: () => void) => void): Connector<C>;
}

/** A config with its secret fields hidden as `secrets` says. */
export function redactSecrets<C>(config: C, secrets: Record<string, SecretKind>): C {
  const redacted = { ...config } as Record<string, unknown>;
  for (const [name, kind] of Object.entries(secrets)) {
    const value = redacted[name];
    if (value === undefined) continue;
    if (kind === "value" || kind === "wholeUrl") redacted[name] = REDACTED;
    else if (kind === "url") redacted[name] = redactUrlSecrets(String(value));
    else {
      redacted[name] = Object.fromEntries(
        Object.keys(value as Record<string, unknown>).map((key) => [key, REDACTED]),
      );
    }
  }
  return redacted as C;
}

const text = (value: unknown) => typeof value === "string" ? value : String(value ?? "");

/** An HTTP destination's method and `scheme://host[:port]` (its path and query may hold secrets). */
export function httpTarget(config: Record<string, unknown>): DestinationTarget {
  return { method: text(config.method ?? "POST"), url: urlOrigin(text(config.url)) };
}

/** An HTTP destination's host: its `url`'s, when it parses. */
export function urlHosts(config: Record<string, unknown>): ConfigHost[] {
  const { url } = config;
  return typeof url === "string" && URL.canParse(url)
    ? [{ path: "config.url", host: new URL(url).hostname }]
    : [];
}

/** Why an edit's secret could not be kept: the field and a message for the caller. */
export interface KeptSecretIssue {
  path: string;
  message: string;
}

/**
 * An edited config with the stored secrets it leaves out kept (CONTRACT "Edits keep
 * stored secrets"): a secret field that is missing or sent as shown (`"********"`, a URL
 * as redactSecrets shows it, a header value `"********"`) takes the stored value; `null`
 * removes it. Every other field is the edit's, so a client that sends the whole config
 * sees the spec's replace-whole behaviour. A shown URL that was changed cannot be merged
 * (its hidden parts would be lost), so it is an issue to report, not a guess.
 */
export function keepStoredSecrets(
  edit: unknown,
  stored: Record<string, unknown>,
  secrets: Record<string, SecretKind>,
): { config: unknown; issues: KeptSecretIssue[] } {
  if (typeof edit !== "object" || edit === null || Array.isArray(edit)) {
    return { config: edit, issues: [] };
  }
  const config = { ...edit } as Record<string, unknown>;
  const issues: KeptSecretIssue[] = [];
  for (const [name, kind] of Object.entries(secrets)) {
    const value = config[name];
    const kept = stored[name];
    if (value === null) delete config[name];
    else if (value === undefined) {
      if (kept !== undefined) config[name] = kept;
    } else if (kind === "value" || kind === "wholeUrl") {
      if (value === REDACTED && kept === undefined) delete config[name];
      else if (value === REDACTED) config[name] = kept;
    } else if (kind === "url" && typeof value === "string" && value.includes(REDACTED)) {
      if (typeof kept === "string" && value === redactUrlSecrets(kept)) config[name] = kept;
      else {
        issues.push({
          path: `config.${name}`,
          message: "Send the whole URL again: its hidden parts cannot be kept when it changes",
        });
      }
    } else if (kind === "headerValues" && typeof value === "object" && !Array.isArray(value)) {
      const keptHeaders = (kept ?? {}) as Record<string, unknown>;
      const headers = { ...value as Record<string, unknown> };
      for (const [header, headerValue] of Object.entries(headers)) {
        if (headerValue !== REDACTED) continue;
        if (typeof keptHeaders[header] === "string") headers[header] = keptHeaders[header];
        else {
          issues.push({
            path: `config.${name}.${header}`,
            message: "No value is stored for this header: send its value",
          });
        }
      }
      config[name] = headers;
    }
  }
  return { config, issues };
}

/** The secret fields a stored config has a value for (what admin answers call `secretsSet`). */
export function secretsSet(
  config: Record<string, unknown>,
  secrets: Record<string, SecretKind>,
): string[] {
  return Object.keys(secrets).filter((name) => {
    const value = config[name];
    if (value === undefined || value === null || value === "") return false;
    return typeof value !== "object" || Object.keys(value).length > 0;
  });
}
