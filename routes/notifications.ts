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
  putNotificationSettings,
  queueTest,
  testEvent,
} from "../store/notifications.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import {
  ApiError,
  readEmptyBody,
  readOptionalJson,
  readValidJson,
  refuseOtherMethods,
} from "./http.ts";
import { tooManyRequests } from "./limits.ts";
import { createTokenBuckets } from "../delivery/token_buckets.ts";
import { ERRORS } from "./errors.ts";

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
    previousSecretValidUntil: z.string().nullable().optional(),
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
  return { ...settings, webhook };
}

/** `scheme://host[:port]/********`: a webhook URL's path and query are its secret. */
function redactedUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}/${REDACTED}`;
}

/** `/notifications` routes. */
export function notificationRoutes({ db, config, notifier, now = Date.now }: AppDeps) {
  const router = new Hono<AdminEnv>();
  // Tests are outbound traffic a tenant triggers at will: bounded like test sends.
  const tests = createTokenBuckets({ capacity: config.testSendLimits.perOrg, windowMs: 60_000 });

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
      if (via === "platform") {
        if (config.platformSmtp === null) {
          issues.push({
            path: "email.via",
            message:
              "The platform SMTP relay is not configured: give one of your SMTP destinations",
          });
        } else if (to.length > config.relayLimits.maxRecipients) {
          issues.push({
            path: "email.to",
            message:
              `At most ${config.relayLimits.maxRecipients} recipients through the platform relay (PLATFORM_SMTP_MAX_RECIPIENTS)`,
          });
        }
      } else {
        const record = await findOrgDestination(db, orgId, via);
        if (record === null || record.type !== "smtp") {
          issues.push({
            path: "email.via",
            message: `No SMTP destination "${via}" in this organization`,
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
          message: `No chat destination "${id}" in this organization`,
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
    await putNotificationSettings(db, orgId, settings);
    return c.json({ ok: true, notifications: settingsView(settings, now()) });
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

  refuseOtherMethods(
    router,
    "/notifications",
    "/notifications/test",
    "/notifications/sent",
    "/notifications/webhook/rotate-secret",
  );
  return router;
}
