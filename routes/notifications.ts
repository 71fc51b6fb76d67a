/**
 * Owner notifications' admin API: `GET`/`PUT /notifications` (where the organization is
 * told and of what) and `GET /notifications/sent` (what was sent lately, to which
 * channel, with what result). The webhook's secret and URL path are never answered:
 * they come back redacted, and a `PUT` that sends the redacted value (or leaves the
 * secret out) keeps the stored one; `secret: null` removes it. `POST
 * /notifications/webhook/rotate-secret` (an addition) replaces the secret, the replaced
 * one signing too for a grace period.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { webhookConfigSchema } from "../connectors/webhook.ts";
import {
  keepPreviousSecrets,
  previousSecretValidUntil,
  rotateSecretSchema,
  rotateSigningSecret,
} from "../connectors/signing.ts";
import { REDACTED } from "../connectors/types.ts";
import { literalHostRefusal } from "../connectors/outbound_guard.ts";
import { channelsFor, CHAT_TYPES, findOrgDestination } from "../notify/mod.ts";
import {
  defaultSettings,
  editNotificationSettings,
  getNotificationSettings,
  listNotifyLog,
  type NotificationSettings,
  NOTIFY_EVENTS,
  testEvent,
} from "../store/notifications.ts";
import { queueTest } from "../store/notice_jobs.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { readEmptyBody, readOptionalJson, readValidJson, refuseOtherMethods } from "./http.ts";
import { tooManyRequests } from "./limits.ts";
import { takeTestSend } from "../store/test_send_limits.ts";
import {
  addressId,
  confirmationOf,
  saveNotificationSettings,
} from "../store/notify_confirmations.ts";
import { createAddressConfirmations } from "../notify/address_confirmation.ts";
import { describeError } from "../log.ts";
import { ApiError, ERRORS } from "../errors.ts";
import { jsonBodyErrors, ok, type OperationSpec, rotateSecretOperation } from "./operation_spec.ts";

/** The events an organization may choose (the summary is chosen apart). */
const CHOOSABLE = NOTIFY_EVENTS.filter((type) => type !== "summary" && type !== "test") as [
  NotificationSettings["events"][number],
  ...NotificationSettings["events"][number][],
];

/** The `PUT /notifications` body. */
export const notificationSettingsSchema = z.strictObject({
  email: z.strictObject({
    to: z.array(z.email()).min(1).max(20),
    via: z.string().min(1).default("platform"),
    /** Answered, ignored: each address's confirmation is the service's to keep. */
    addresses: z.array(z.unknown()).optional(),
  }).nullable().default(null),
  chat: z.array(z.string().min(1)).max(10).default([]),
  webhook: z.strictObject({
    url: z.string().min(1),
    secret: z.string().nullable().optional(),
    /** Answered, ignored: a GET answer can be sent back as it is. */
    signed: z.boolean().optional(),
    previousSecretValidUntil: z.string().nullable().optional(),
  }).nullable().default(null),
  events: z.array(z.enum(CHOOSABLE)).default([...CHOOSABLE]),
  summary: z.enum(["off", "daily", "weekly"]).optional(),
});

/** One notification address as answered. */
const addressView = z.strictObject({
  address: z.string(),
  state: z.enum(["pending", "confirmed"]),
  confirmedAt: z.iso.datetime().nullable(),
  /** The last confirmation message sent, or null. */
  sentAt: z.iso.datetime().nullable(),
  /** Why the last confirmation message could not be sent, or null. */
  error: z.string().nullable(),
});

/** `POST /notifications/email/confirmation`'s body. */
export const confirmationRequestSchema = z.strictObject({ address: z.string().min(1).max(254) });

/** The settings as answered (OpenAPI). */
export const notificationSettingsView = z.strictObject({
  email: z.strictObject({
    to: z.array(z.string()),
    via: z.string(),
    addresses: z.array(addressView).meta({
      description: "Each address's confirmation: notifications go to confirmed ones only",
    }),
  }).nullable(),
  chat: z.array(z.string()),
  webhook: z.strictObject({
    url: z.string().meta({ description: "scheme://host[:port]/********" }),
    secret: z.literal(REDACTED).nullable(),
    signed: z.boolean(),
    previousSecretValidUntil: z.iso.datetime().nullable().meta({
      description: "Until when the secret replaced by a rotation signs too; null: none does",
    }),
  }).nullable(),
  events: z.array(z.enum(CHOOSABLE)),
  summary: z.enum(["off", "daily", "weekly"]),
});

/** One sent notification as listed (OpenAPI). */
export const notificationSentSchema = z.strictObject({
  id: z.string(),
  at: z.iso.datetime(),
  type: z.enum(NOTIFY_EVENTS),
  channel: z.union([
    z.strictObject({ kind: z.enum(["email", "webhook"]) }),
    z.strictObject({ kind: z.literal("chat"), destinationId: z.string() }),
  ]),
  subject: z.string().meta({ description: 'The destination id, "org", or the summary period' }),
  count: z.number().int(),
  delivered: z.boolean(),
  attempts: z.number().int(),
  error: z.string().nullable(),
});

/** Most sent notifications listed. */
const SENT_LIMIT = 50;

/** The settings as answered: the webhook's URL path and secrets redacted. */
function settingsView(settings: NotificationSettings, now: number) {
  const webhook = settings.webhook === null ? null : {
    url: redactedUrl(settings.webhook.url),
    secret: settings.webhook.secret === null ? null : REDACTED,
    signed: settings.webhook.secret !== null,
    previousSecretValidUntil: previousSecretValidUntil(settings.webhook, now),
  };
  const email = settings.email === null ? null : {
    to: settings.email.to,
    via: settings.email.via,
    addresses: settings.email.to.map((address) => addressOf(settings.email, address)),
  };
  return { ...settings, email, webhook };
}

/** One address's confirmation as answered. */
function addressOf(email: NotificationSettings["email"], address: string) {
  const state = confirmationOf(email, address);
  const iso = (at: number | null | undefined) => at == null ? null : new Date(at).toISOString();
  return {
    address,
    state: state.confirmedAt === null ? "pending" as const : "confirmed" as const,
    confirmedAt: iso(state.confirmedAt),
    sentAt: iso(state.sent.at(-1)),
    error: state.error,
  };
}

/** `scheme://host[:port]/********`: a webhook URL's path and query are its secret. */
function redactedUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}/${REDACTED}`;
}

/** `/notifications` routes. */
export function notificationRoutes(
  { db, config, notifier, connectors, outbound, logger, now = Date.now }: AppDeps,
) {
  const router = new Hono<AdminEnv>();
  const confirmations = createAddressConfirmations({
    db,
    mail: connectors.smtp.mail,
    outbound,
    publicUrl: config.publicUrl,
    logger,
  });

  /** Sends a new address its confirmation in the background: the owner sees its state. */
  function confirmLater(
    orgId: string,
    email: NonNullable<NotificationSettings["email"]>,
    address: string,
  ) {
    confirmations.send(orgId, email, address).catch((error) =>
      logger.error("notification address confirmation failed", {
        orgId,
        error: describeError(error),
      })
    );
  }

  async function current(orgId: string): Promise<NotificationSettings> {
    return await getNotificationSettings(db, orgId) ?? defaultSettings(config.notify.summary);
  }

  router.get("/notifications", async (c) => {
    return c.json({ ok: true, notifications: settingsView(await current(c.get("orgId")), now()) });
  });

  router.put("/notifications", async (c) => {
    const orgId = c.get("orgId");
    const body = await readValidJson(c, notificationSettingsSchema);
    const before = await current(orgId);
    const issues: { path: string; message: string }[] = [];

    let email: NotificationSettings["email"] = null;
    if (body.email !== null) {
      const { to, via } = body.email;
      if (config.publicUrl === null) {
        issues.push({
          path: "email",
          message:
            "Email notifications need PUBLIC_URL on this service (each address is sent a link to confirm it): ask its host",
        });
      }
      if (via === "platform") {
        if (config.platformSmtp === null) {
          issues.push({
            path: "email.via",
            message:
              "This deployment has no platform mail relay, so choose one of your SMTP destinations that has its own server",
          });
        } else if (to.length > config.relayLimits.maxRecipients) {
          issues.push({
            path: "email.to",
            message:
              `The platform relay takes at most ${config.relayLimits.maxRecipients} recipients (PLATFORM_SMTP_MAX_RECIPIENTS)`,
          });
        }
      } else {
        const record = await findOrgDestination(db, orgId, via);
        if (record === null || record.type !== "smtp") {
          issues.push({
            path: "email.via",
            message: `There is no SMTP destination "${via}" in this organization`,
          });
        }
      }
      email = { to, via };
    }

    const chat = [...new Set(body.chat)];
    for (const [i, id] of chat.entries()) {
      const record = await findOrgDestination(db, orgId, id);
      if (record === null || !CHAT_TYPES.includes(record.type)) {
        issues.push({
          path: `chat.${i}`,
          message: `There is no chat destination "${id}" in this organization`,
        });
      }
    }

    let webhook: NotificationSettings["webhook"] = null;
    if (body.webhook !== null) {
      const kept = before.webhook;
      const url = body.webhook.url.includes(REDACTED) && kept !== null
        ? kept.url
        : body.webhook.url;
      // Left out or redacted: kept; null: removed; else the new one.
      const given = body.webhook.secret;
      const secret = given === undefined || given === REDACTED ? kept?.secret ?? null : given;
      const checked = webhookConfigSchema.safeParse({ url, ...(secret ? { secret } : {}) });
      if (!checked.success) {
        for (const issue of checked.error.issues) {
          issues.push({ path: ["webhook", ...issue.path].join("."), message: issue.message });
        }
      } else {
        // As for destinations: a private address this deployment will not send to is said now.
        const refusal = literalHostRefusal(new URL(url).hostname, config.allowPrivateDestinations);
        if (refusal !== null) issues.push({ path: "webhook.url", message: refusal });
      }
      // Keeping the secret keeps the earlier ones in their grace; replacing it ends them.
      const { previousSecrets } = keepPreviousSecrets(kept ?? {}, { secret }, now());
      webhook = { url, secret, ...(previousSecrets ? { previousSecrets } : {}) };
    }
    if (issues.length > 0) throw new ApiError(ERRORS.validation, { issues });

    const settings: NotificationSettings = {
      email,
      chat,
      webhook,
      events: [...new Set(body.events)],
      summary: body.summary ?? before.summary,
    };
    const saved = await saveNotificationSettings(db, orgId, settings);
    for (const address of saved.added) confirmLater(orgId, saved.settings.email!, address);
    return c.json({ ok: true, notifications: settingsView(saved.settings, now()) });
  });

  router.post("/notifications/email/confirmation", async (c) => {
    const orgId = c.get("orgId");
    const { address } = await readValidJson(c, confirmationRequestSchema);
    const { email } = await current(orgId);
    const listed = email?.to.find((candidate) => addressId(candidate) === addressId(address));
    if (email == null || listed === undefined) throw new ApiError(ERRORS.notifyAddressNotFound);
    const result = await confirmations.send(orgId, email, listed);
    if (!result.sent && "refused" in result) {
      if (result.refused === "limit") {
        tooManyRequests(c, ERRORS.tooManyConfirmations, { retryAfterMs: result.retryAfterMs });
      }
      throw new ApiError(
        result.refused === "confirmed" ? ERRORS.addressConfirmed : ERRORS.notifyAddressNotFound,
      );
    }
    const after = await current(orgId);
    return c.json({ ok: true, address: addressOf(after.email, listed) });
  });

  // Addition: a new signing secret, the replaced one signing too for the grace period.
  router.post("/notifications/webhook/rotate-secret", async (c) => {
    const orgId = c.get("orgId");
    const { graceHours } = await readOptionalJson(c, rotateSecretSchema);
    const rotated = await editNotificationSettings(db, orgId, (settings) => {
      const webhook = settings?.webhook;
      if (!settings || !webhook) {
        throw new ApiError(ERRORS.validation, {
          issues: [{ path: "webhook", message: "No operational webhook is set" }],
        });
      }
      const rotation = rotateSigningSecret(
        webhook,
        { now: now(), graceMs: graceHours * 3_600_000 },
      );
      return { settings: { ...settings, webhook: rotation.config }, result: rotation };
    });
    const { secret, previousValidUntil } = rotated;
    return c.json({ ok: true, secret, previousValidUntil });
  });

  router.post("/notifications/test", async (c) => {
    const orgId = c.get("orgId");
    await readEmptyBody(c);
    const settings = await getNotificationSettings(db, orgId);
    const at = now();
    // Outbound traffic a tenant triggers at will: bounded like test sends, deployment-wide.
    const bucket = { scope: "notifications", capacity: config.testSendLimits.perOrg };
    const taken = await takeTestSend(db, orgId, [bucket], at);
    if (!taken.ok) {
      tooManyRequests(c, ERRORS.tooManyTestSends, { retryAfterMs: taken.retryAfterMs });
    }
    const channels = channelsFor(settings, testEvent(orgId, at));
    const jobs = await queueTest(db, { orgId, channels, now: at });
    notifier?.wakeNotices(jobs);
    return c.json({ ok: true, queued: jobs.length });
  });

  router.get("/notifications/sent", async (c) => {
    const sent = await listNotifyLog(db, c.get("orgId"), SENT_LIMIT);
    return c.json({ ok: true, sent });
  });

  refuseOtherMethods(
    router,
    "/notifications",
    "/notifications/test",
    "/notifications/sent",
    "/notifications/email/confirmation",
    "/notifications/webhook/rotate-secret",
  );
  return router;
}

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const notificationOperations: OperationSpec[] = [
  {
    method: "get",
    path: "/v1/admin/notifications",
    summary: "Where the organization is told of failing, paused and recovered destinations, " +
      "submissions failed for good, key rotations and summaries (docs/notifications.md)",
    tag: "Admin: notifications",
    admin: true,
    answers: {
      200: {
        description: "The settings; the webhook's URL path and secret redacted",
        schema: z.strictObject({ ok, notifications: notificationSettingsView }),
      },
    },
    errors: [],
  },
  {
    method: "put",
    path: "/v1/admin/notifications",
    summary: "Replaces the notification settings; a left-out or redacted webhook secret " +
      "and a redacted URL are kept, `secret: null` removes the secret",
    tag: "Admin: notifications",
    admin: true,
    body: { schema: notificationSettingsSchema, required: true },
    answers: {
      200: {
        description: "The settings as stored, redacted",
        schema: z.strictObject({ ok, notifications: notificationSettingsView }),
      },
    },
    errors: jsonBodyErrors,
  },
  {
    method: "post",
    path: "/v1/admin/notifications/test",
    summary: "Sends a test notification to every chosen channel now (TEST_SENDS_PER_ORG a " +
      "minute); its result shows in /notifications/sent",
    tag: "Admin: notifications",
    admin: true,
    answers: {
      200: {
        description: "How many channels it was queued to",
        schema: z.strictObject({ ok, queued: z.number().int() }),
      },
    },
    errors: [...jsonBodyErrors, ERRORS.tooManyTestSends],
  },
  {
    method: "get",
    path: "/v1/admin/notifications/sent",
    summary: "The last 50 notifications of the past 7 days, newest first, with their result",
    tag: "Admin: notifications",
    admin: true,
    answers: {
      200: {
        description: "Sent and given-up notifications",
        schema: z.strictObject({ ok, sent: z.array(notificationSentSchema) }),
      },
    },
    errors: [],
  },
  rotateSecretOperation(
    "/v1/admin/notifications/webhook/rotate-secret",
    "Admin: notifications",
    [],
  ),
  {
    method: "post",
    path: "/v1/admin/notifications/email/confirmation",
    summary: "Sends a pending notification address its confirmation link again (at most " +
      "3 a day per address, a minute apart); nothing else goes to it until it is followed",
    tag: "Admin: notifications",
    admin: true,
    body: { schema: confirmationRequestSchema, required: true },
    answers: {
      200: {
        description: "Sent (or why not, in `error`)",
        schema: z.strictObject({
          ok,
          address: notificationSettingsView.shape.email.unwrap().shape.addresses.element,
        }),
      },
    },
    errors: [
      ...jsonBodyErrors,
      ERRORS.notifyAddressNotFound,
      ERRORS.addressConfirmed,
      ERRORS.tooManyConfirmations,
    ],
  },
];
