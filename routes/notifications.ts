/**
 * Owner notifications' admin API: `GET`/`PUT /notifications` (where the organization is
 * told and of what) and `GET /notifications/sent` (what was sent lately, to which
 * channel, with what result). The webhook's secret and URL path are never answered:
 * they come back redacted, and a `PUT` that sends the redacted value (or leaves the
 * secret out) keeps the stored one; `secret: null` removes it.
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { webhookConfigSchema } from "../connectors/webhook.ts";
import { REDACTED } from "../connectors/types.ts";
import { literalHostRefusal } from "../connectors/outbound_guard.ts";
import { channelsFor, CHAT_TYPES, findOrgDestination } from "../notify/mod.ts";
import {
  defaultSettings,
  getNotificationSettings,
  listNotifyLog,
  type NotificationSettings,
  NOTIFY_EVENTS,
  putNotificationSettings,
  queueTest,
  testEvent,
} from "../store/notifications.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { ApiError, readEmptyBody, readValidJson, refuseOtherMethods } from "./http.ts";
import { tooManyRequests } from "./limits.ts";
import { createTokenBuckets } from "../delivery/token_buckets.ts";
import { ERRORS } from "./errors.ts";
import { jsonBodyErrors, ok, type OperationSpec } from "./operation_spec.ts";

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
  }).nullable().default(null),
  chat: z.array(z.string().min(1)).max(10).default([]),
  webhook: z.strictObject({
    url: z.string().min(1),
    secret: z.string().nullable().optional(),
    /** Answered, ignored: a GET answer can be sent back as it is. */
    signed: z.boolean().optional(),
  }).nullable().default(null),
  events: z.array(z.enum(CHOOSABLE)).default([...CHOOSABLE]),
  summary: z.enum(["off", "daily", "weekly"]).optional(),
});

/** The settings as answered (OpenAPI). */
export const notificationSettingsView = z.strictObject({
  email: z.strictObject({ to: z.array(z.string()), via: z.string() }).nullable(),
  chat: z.array(z.string()),
  webhook: z.strictObject({
    url: z.string().meta({ description: "scheme://host[:port]/********" }),
    secret: z.literal(REDACTED).nullable(),
    signed: z.boolean(),
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

/** The settings as answered: the webhook's URL path and secret redacted. */
function settingsView(settings: NotificationSettings) {
  const webhook = settings.webhook === null ? null : {
    url: redactedUrl(settings.webhook.url),
    secret: settings.webhook.secret === null ? null : REDACTED,
    signed: settings.webhook.secret !== null,
  };
  return { ...settings, webhook };
}

/** `scheme://host[:port]/********`: a webhook URL's path and query are its secret. */
function redactedUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}/${REDACTED}`;
}

/** `/notifications` routes. */
export function notificationRoutes({ db, config, notifier }: AppDeps) {
  const router = new Hono<AdminEnv>();
  // Tests are outbound traffic a tenant triggers at will: bounded like test sends.
  const tests = createTokenBuckets({ capacity: config.testSendLimits.perOrg, windowMs: 60_000 });

  async function current(orgId: string): Promise<NotificationSettings> {
    return await getNotificationSettings(db, orgId) ?? defaultSettings(config.notify.summary);
  }

  router.get("/notifications", async (c) => {
    return c.json({ ok: true, notifications: settingsView(await current(c.get("orgId"))) });
  });

  router.put("/notifications", async (c) => {
    const orgId = c.get("orgId");
    const body = await readValidJson(c, notificationSettingsSchema);
    const before = await current(orgId);
    const issues: { path: string; message: string }[] = [];

    let email: NotificationSettings["email"] = null;
    if (body.email !== null) {
      const { to, via } = body.email;
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
      webhook = { url, secret };
    }
    if (issues.length > 0) throw new ApiError(ERRORS.validation, { issues });

    const settings: NotificationSettings = {
      email,
      chat,
      webhook,
      events: [...new Set(body.events)],
      summary: body.summary ?? before.summary,
    };
    await putNotificationSettings(db, orgId, settings);
    return c.json({ ok: true, notifications: settingsView(settings) });
  });

  router.post("/notifications/test", async (c) => {
    const orgId = c.get("orgId");
    await readEmptyBody(c);
    const settings = await getNotificationSettings(db, orgId);
    const now = Date.now();
    const waitMs = tests.waitMs(orgId, 1, now);
    if (waitMs > 0) tooManyRequests(c, ERRORS.tooManyTestSends, { retryAfterMs: waitMs });
    tests.take(orgId, 1, now);
    const channels = channelsFor(settings, testEvent(orgId, now));
    const queued = await queueTest(db, { orgId, channels, now });
    notifier?.wake();
    return c.json({ ok: true, queued });
  });

  router.get("/notifications/sent", async (c) => {
    const sent = await listNotifyLog(db, c.get("orgId"), SENT_LIMIT);
    return c.json({ ok: true, sent });
  });

  refuseOtherMethods(router, "/notifications", "/notifications/test", "/notifications/sent");
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
];
