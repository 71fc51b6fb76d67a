import { humanMessages } from "../validation_messages.ts";

import { z } from "zod";
import type { PlatformSmtp } from "../config.ts";
import { buildMessage, type MailMessage, renderSubject } from "./smtp/message.ts";
import { buildNoticeMessage } from "./smtp/notice_message.ts";
import {
  describeRejected,
  type PreparedMail,
  type SendResult,
  SmtpConnection,
  SmtpError,
} from "./smtp/client.ts";
import type { OutboundGuard } from "./outbound_guard.ts";
import { type Adopted, RelayGate, SmtpPool } from "./smtp/pool.ts";
import {
  type Connector,
  DeliveryError,
  type DeliveryReceipt,
  type MailRoute,
  type MailSender,
  type OwnWait,
} from "./types.ts";
import {
  type ConsoleField,
  type DestinationDescriptor,
  type DestinationTarget,
  redactSecrets,
} from "./descriptor.ts";

const email = z.email();
const recipients = z.array(email).min(1);

/**
 * A subject as the spec has it (at least one character). Its placeholders are rendered
 * (template.ts); an unknown one stays as written rather than being refused, since the
 * spec accepts any subject and subjects stored before placeholders were checked must
 * still deliver.
 */
const subjectTemplate = z.string().min(1);

/** SMTP Variant A: the tenant supplies the relay (spec 2.3). */
export const smtpRelayConfigSchema = z.strictObject({
  host: z.string().min(1),
  port: z.number().int().min(1).max(65535),
  secureTransport: z.enum(["off", "starttls", "on"]).default("starttls"),
  username: z.string().min(1),
  password: z.string().min(1),
  from: email,
  to: recipients,
  subjectTemplate: subjectTemplate.default("New submission: {{formName}}"),
});

/** SMTP Variant B: the platform relay from PLATFORM_SMTP_* (spec 2.3). */
export const smtpPlatformConfigSchema = z.strictObject({
  to: recipients,
  subjectTemplate: subjectTemplate.default("Form submission: {{formName}}"),
});

export type SmtpRelayConfig = z.infer<typeof smtpRelayConfigSchema>;
export type SmtpPlatformConfig = z.infer<typeof smtpPlatformConfigSchema>;
export type SmtpConfig = SmtpRelayConfig | SmtpPlatformConfig;

/** Variant A configs are told apart from Variant B by their relay host (CONTRACT). */
export function isRelayConfig(config: SmtpConfig): config is SmtpRelayConfig {
  return "host" in config;
}

/**
 * The smtp config schema: Variant A when `host` is given, else Variant B, which is
 * only valid when the platform relay is configured, with at most `maxPlatformRecipients`
 * addresses (PLATFORM_SMTP_MAX_RECIPIENTS: the platform's relay and reputation are
 * shared, so one destination cannot mail a list).
 */
export function smtpConfigSchema(
  platformConfigured: boolean,
  maxPlatformRecipients = Infinity,
): z.ZodType<SmtpConfig> {
  return z.unknown().transform((value, ctx): SmtpConfig => {
    const isObject = typeof value === "object" && value !== null;
    const schema = isObject && "host" in value ? smtpRelayConfigSchema : smtpPlatformConfigSchema;
    // The routes' words for each issue: they are re-added below as custom issues.
    const result = schema.safeParse(value, { error: humanMessages });
    if (!result.success) {
      for (const issue of result.error.issues) ctx.addIssue({ ...issue, code: "custom" });
      return z.NEVER;
    }
    if (schema === smtpPlatformConfigSchema && !platformConfigured) {
      ctx.addIssue({
        code: "custom",
        message:
          "This deployment has no platform mail relay, so give your own server's host, port, username, password and from",
      });
      return z.NEVER;
    }
    if (schema === smtpPlatformConfigSchema && result.data.to.length > maxPlatformRecipients) {
      ctx.addIssue({
        code: "custom",
        path: ["to"],
        message:
          `The platform relay takes at most ${maxPlatformRecipients} recipients (PLATFORM_SMTP_MAX_RECIPIENTS)`,
      });
      return z.NEVER;
    }
    return result.data;
  }) as unknown as z.ZodType<SmtpConfig>;
}

/** What {@linkcode createSmtpConnector} needs from the deployment. */
export interface SmtpConnectorDeps {
  /** The platform relay for Variant B configs; null when not configured. */
  platform: PlatformSmtp | null;
  /** Most recipients of a Variant B config (PLATFORM_SMTP_MAX_RECIPIENTS); none by default. */
  maxPlatformRecipients?: number;
  /** The name sent with EHLO (SMTP_HELO_NAME). */
  heloName: string;
  /** Time-out of one whole conversation (SMTP_TIMEOUT_MS); also caps each wait. */
  timeoutMs: number;
  /** Extra trusted CA certificates (PEM) for TLS. */
  caCerts?: string[];
  /**
   * Outbound-address guard: refuses a relay host that is not allowed, else names the
   * address to connect to. Without it relays are reached by name.
   */
  guard?: OutboundGuard;
  /** How long an idle session to a relay is kept for the next message; 0 disables reuse. */
  idleMs?: number;
}

const text = (value: unknown) => typeof value === "string" ? value : String(value ?? "");

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

/** The inputs both SMTP variants share. */
const SMTP_COMMON_FIELDS: ConsoleField[] = [
  { name: "to", label: "Recipients", kind: "list", help: "One address per line." },
  {
    name: "subjectTemplate",
    label: "Subject",
    kind: "text",
    optional: true,
    help: "Optional. {{formName}}, {{submissionId}}, {{submittedAt}}, {{origin}} and " +
      "{{fields.NAME}} are replaced.",
  },
];

/** The SMTP destination type: Variant A (the tenant's relay) and Variant B (the platform's). */
export const smtpDestination: DestinationDescriptor<SmtpConfig, "smtp"> = {
  type: "smtp",
  label: "Email",
  group: "email",
  // Told apart by `host` (Variant A) or its absence (Variant B, the platform relay).
  docSchema: z.union([smtpRelayConfigSchema, smtpPlatformConfigSchema]),
  target: smtpTarget,
  // Variant A's relay; Variant B's is the deployment's.
  hosts: (config) =>
    typeof config.host === "string" ? [{ path: "config.host", host: config.host }] : [],
  preview: (envelope, config) => ({
    subject: renderSubject(
      typeof config.subjectTemplate === "string" && config.subjectTemplate !== ""
        ? config.subjectTemplate
        : "host" in config
        ? "New submission: {{formName}}"
        : "Form submission: {{formName}}",
      envelope,
    ),
  }),
  secrets: { password: "value" },
  editors: [
    {
      kind: "smtp_relay",
      label: "Email through your SMTP server",
      where: "Your mail provider's SMTP settings (host, port, username and password).",
      when: { has: "host" },
      fields: [
        { name: "host", label: "SMTP host", kind: "text" },
        {
          name: "port",
          label: "Port",
          kind: "number",
          initial: 587,
          help: "587 for STARTTLS, 465 for TLS.",
        },
        {
          name: "secureTransport",
          label: "Secure transport",
          kind: "select",
          options: ["starttls", "on", "off"],
          help: "starttls (587), on (TLS from the start, 465) or off (plain text).",
        },
        { name: "username", label: "Username", kind: "text" },
        { name: "password", label: "Password", kind: "secret" },
        { name: "from", label: "From address", kind: "email" },
        ...SMTP_COMMON_FIELDS,
      ],
    },
    {
      kind: "smtp_platform",
      label: "Email through this service's relay",
      when: { lacks: "host" },
      requires: "platformRelay",
      fields: SMTP_COMMON_FIELDS,
    },
  ],
  create(deps, onClose) {
    const smtp = createSmtpConnector({
      platform: deps.config.platformSmtp,
      maxPlatformRecipients: deps.config.relayLimits.maxRecipients,
      heloName: deps.config.smtpHeloName,
      timeoutMs: deps.config.smtpTimeoutMs,
      caCerts: deps.caCerts,
      guard: deps.guard,
    });
    onClose(() => smtp.close());
    return smtp;
  },
};

/** Connect time-out at most; the conversation time-out applies when smaller. */
const CONNECT_MS = 15_000;
/** Greeting and per-command time-outs at most. */
const COMMAND_MS = 30_000;
const DEFAULT_IDLE_MS = 3_000;
const MAX_IDLE_PER_RELAY = 20;
/**
 * Sessions open at once to one relay, across destinations (RelayGate): it starts with
 * this many and grows while the relay accepts, as Postfix's destination concurrency
 * (initial 5, limit 20)...
 */
const INITIAL_SESSIONS_PER_RELAY = 5;
/** ...up to this many. */
export const MAX_SESSIONS_PER_RELAY = 20;
/** Replies by which a relay says it is busy with us: too many connections or messages. */
const SLOW_DOWN_CODES = new Set([421, 451]);

/**
 * The SMTP connector: builds the message for the config's variant and sends it
 * over raw TCP. `close()` ends the idle sessions it keeps for reuse.
 */
export function createSmtpConnector(
  deps: SmtpConnectorDeps,
): Connector<SmtpConfig> & { mail: MailSender<SmtpConfig>; close(): void } {
  const pool = new SmtpPool({
    idleMs: deps.idleMs ?? DEFAULT_IDLE_MS,
    maxIdlePerKey: MAX_IDLE_PER_RELAY,
  });
  const gate = new RelayGate<Rider>(INITIAL_SESSIONS_PER_RELAY, MAX_SESSIONS_PER_RELAY);
  const timeouts = {
    connectMs: Math.min(deps.timeoutMs, CONNECT_MS),
    greetingMs: Math.min(deps.timeoutMs, COMMAND_MS),
    commandMs: Math.min(deps.timeoutMs, COMMAND_MS),
  };

  /** Sends the message `build` makes for the config's route, through a pooled session. */
  async function sendMail(
    config: SmtpConfig,
    { build, signal, ownWait }: {
      build: (route: MailRoute) => MailMessage;
      signal: AbortSignal;
      ownWait?: OwnWait;
    },
  ): Promise<DeliveryReceipt> {
    const deadline = Date.now() + deps.timeoutMs;
    const route = resolveRoute(config, deps.platform);
    const target = `"${printable(route.relay.host)}:${route.relay.port}"`;
    const message = build(route);
    const key = JSON.stringify([
      route.relay.host.toLowerCase(),
      route.relay.port,
      route.relay.secureTransport,
      route.relay.username,
      route.relay.password,
    ]);

    const entering = performance.now();
    const rider: Rider = { mail: message, prepared: null, session: null };
    const leave = await gate.enter(key, {
      deadline,
      signal,
      timedOut: () =>
        new DeliveryError(`Cannot deliver to ${target}: no session to the relay free in time`, {
          permanent: false,
        }),
      rider,
    });
    const enteredAt = performance.now();
    // Waiting for a session slot is formrelay's own limit, not the relay's latency.
    if (ownWait) ownWait.ms += enteredAt - entering;
    // A session carries a message waiting for a slot behind its own: that one's commands go
    // out with this message's data, and it gets the session and the slot after (or the
    // slot alone, should this message fail).
    let carried = undefined as Adopted<Rider> | undefined;
    const carryNext = (session: SmtpConnection) => () => {
      carried = gate.adopt(key, (waiting) => session.takesBehind(waiting.mail));
      return carried ? (carried.rider.prepared = session.prepare(carried.rider.mail)) : null;
    };
    let connection = rider.session ?? pool.take(key);
    let result: SendResult | undefined;
    try {
      if (connection) {
        connection.use({ deadline, signal });
        try {
          result = await connection.send(rider.session ? rider.prepared! : message, {
            reused: true,
            written: rider.session !== null,
            next: carryNext(connection),
          });
        } catch (error) {
          // A stale session: nothing was sent, so a fresh one may try again.
          if (!(error instanceof SmtpError && error.beforeTransaction) || signal.aborted) {
            throw error;
          }
          connection.close();
          connection = undefined;
        }
      }
      if (!connection) {
        const guard = deps.guard;
        // The first approved address (IPv4 first), so the name is not resolved again.
        const address = guard && !guard.allowAll
          ? (await guard.approve(route.relay.host))[0]
          : undefined;
        connection = await SmtpConnection.open(route.relay, {
          heloName: deps.heloName,
          timeouts,
          caCerts: deps.caCerts,
          address,
          deadline,
          signal,
        });
        result = await connection.send(message, { next: carryNext(connection) });
      }
    } catch (error) {
      if (connection) await connection.quit();
      if (carried) carried.handOver(leave);
      else leave();
      if (error instanceof SmtpError && SLOW_DOWN_CODES.has(error.replyCode ?? 0)) {
        gate.slowDown(key, enteredAt);
      }
      throw toDeliveryError(error, target);
    }
    gate.accepted(key);
    if (carried) {
      carried.rider.session = connection;
      carried.handOver(leave);
    } else {
      leave();
      if (!pool.put(key, connection)) await connection.quit();
    }
    const receipt: DeliveryReceipt = { statusCode: 250 };
    if (result!.rejected.length > 0) {
      receipt.detail = "Rejected recipients: " + describeRejected(result!.rejected);
    }
    return receipt;
  }

  return {
    configSchema: smtpConfigSchema(deps.platform !== null, deps.maxPlatformRecipients),
    storedConfigSchema: smtpConfigSchema(deps.platform !== null),

    redact: (config) => redactSecrets(config, { password: "value" }),

    deliver({ envelope, config, destinationId, signal, ownWait }): Promise<DeliveryReceipt> {
      return sendMail(config, {
        build: (route) =>
          buildMessage(envelope, {
            layout: route.layout,
            from: route.from,
            to: route.to,
            subjectTemplate: route.subjectTemplate,
            destinationId,
          }),
        signal,
        ownWait,
      });
    },

    mail: { sendMail },

    // Owner notices: formrelay's own words, plain text and HTML (smtp/notice_message.ts).
    notice: {
      sendNotice: (config, { notice, id, signal }) =>
        sendMail(config, {
          build: (route) =>
            buildNoticeMessage(notice, {
              id,
              from: route.from,
              to: route.to,
              platform: route.layout === "alternative",
            }),
          signal,
        }),
    },

    close() {
      pool.close();
    },
  };
}

/**
 * A message waiting for a session slot, as a session that carries it next sees it: the
 * session prepares it and, once its own message is through, hands itself over.
 */
interface Rider {
  mail: MailMessage;
  /** Prepared for the carrying session, its commands already written. */
  prepared: PreparedMail | null;
  /** The session that carried it, or null (none did, or its own message failed). */
  session: SmtpConnection | null;
}

/** Variant A sends through the destination's relay, Variant B through the platform's. */
function resolveRoute(config: SmtpConfig, platform: PlatformSmtp | null): MailRoute {
  if (isRelayConfig(config)) {
    return {
      relay: config,
      layout: "plain",
      from: config.from,
      to: config.to,
      subjectTemplate: config.subjectTemplate,
    };
  }
  if (platform === null) {
    throw new DeliveryError(
      "Cannot deliver by SMTP: the platform relay is not configured on this deployment",
      { permanent: true },
    );
  }
  return {
    relay: platform,
    layout: "alternative",
    from: platform.fromEmail,
    to: config.to,
    subjectTemplate: config.subjectTemplate,
  };
}

function toDeliveryError(error: unknown, target: string): DeliveryError {
  if (error instanceof DeliveryError) return error;
  if (error instanceof SmtpError) {
    // "Too many connections/messages": the relay's pace, not a failure of the message.
    const slowDown = !error.permanent && SLOW_DOWN_CODES.has(error.replyCode ?? 0);
    return new DeliveryError(`Cannot deliver to ${target}: ${error.message}`, {
      permanent: error.permanent,
      pace: slowDown ? { limited: true } : undefined,
      // Refusals of a recipient or the content are this message's; the rest the relay's.
      blame: error.messageRefused ? "submission" : "destination",
      statusCode: error.replyCode,
      cause: error,
    });
  }
  return new DeliveryError(`Cannot deliver to ${target}: unexpected error`, {
    permanent: false,
    cause: error,
  });
}

function printable(value: string): string {
  // deno-lint-ignore no-control-regex -- control characters are what is removed here
  return value.replace(/[\x00-\x1f\x7f"]+/g, "?");
}
