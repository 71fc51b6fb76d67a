import { Hono } from "hono";
import { z } from "zod";
import {
  createForm,
  deleteForm,
  type FormRecord,
  type FormSettings,
  getForm,
  listForms,
  updateForm,
} from "../store/forms.ts";
import type { Db } from "../store/db.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { readValidJson, refuseOtherMethods } from "./http.ts";
import { ApiError, ERRORS } from "../errors.ts";
import { spamRulesSchema } from "../rules/spam.ts";
import { confirmationSchema, type ConfirmationSettings } from "../rules/confirmation.ts";
import { getDestination } from "../store/destinations.ts";
import { healthAlerts } from "../store/destination_health.ts";
import { DESTINATION_TYPES } from "../connectors/registry.ts";
import type { Config } from "../config.ts";
import { REDACTED } from "../connectors/types.ts";
import { FORM_404, jsonBodyErrors, ok, type OperationSpec, timestamp } from "./operation_spec.ts";

const anyHttpUrl = z.url({ protocol: /^https?$/ });

/** Form fields a tenant may set; allowed origins are stored as bare origins. */
const formFields = {
  name: z.string().trim().min(1).max(200),
  allowedOrigins: z.array(anyHttpUrl.transform((url) => new URL(url).origin)).max(100),
  verifyCaptcha: z.boolean(),
  /** `null` removes a stored secret; in an edit, the shown `"********"` keeps it. */
  captchaSecret: z.string().min(1).max(1000).nullable(),
  enabled: z.boolean(),
  honeypotField: z.string().min(1).max(100).nullable(),
  redirectUrl: anyHttpUrl.max(2000).nullable(),
  spamRules: spamRulesSchema.nullable(),
  confirmation: confirmationSchema.nullable(),
};

/** Longest form or destination id looked up; real ones are 36-character UUIDs. */
const MAX_ID_LENGTH = 200;

/** Body of `POST /forms`. */
export const formCreateSchema = z.strictObject(formFields).partial().required({ name: true });
/** Body of `PATCH /forms/:id`. */
export const formPatchSchema = z.strictObject(formFields).partial();

const DEFAULTS = {
  allowedOrigins: [],
  verifyCaptcha: false,
  enabled: true,
  honeypotField: null,
  redirectUrl: null,
} satisfies Omit<FormSettings, "name">;

function assertCaptchaSecret(settings: FormSettings, hasStoredSecret: boolean) {
  const hasSecret = settings.captchaSecret === undefined
    ? hasStoredSecret
    : settings.captchaSecret !== null;
  if (settings.verifyCaptcha && !hasSecret) {
    throw new ApiError(ERRORS.validation, {
      issues: [{
        path: "captchaSecret",
        message: "Give the captcha secret when verifyCaptcha is true",
      }],
    });
  }
}

/**
 * Refuses a confirmation whose relay cannot send: the platform relay where it is not
 * configured, or a `via` that is not one of the form's SMTP destinations with its own relay.
 */
async function assertConfirmationRelay(
  { db, config }: { db: Db; config: Config },
  formId: string | null,
  confirmation: ConfirmationSettings | null | undefined,
) {
  if (!confirmation) return;
  const { via } = confirmation;
  let message: string | null = null;
  if (via === "platform") {
    if (config.platformSmtp === null) {
      message =
        "This deployment has no platform mail relay, so choose one of the form's SMTP destinations that has its own server";
    }
  } else {
    const destination = formId === null ? null : await getDestination(db, formId, via);
    const relay = destination?.config as Record<string, unknown> | undefined;
    if (destination?.type !== "smtp" || typeof relay?.host !== "string") {
      message =
        'Choose "platform" or the id of one of the form\'s SMTP destinations that has its own server';
    }
  }
  if (message !== null) {
    throw new ApiError(ERRORS.validation, { issues: [{ path: "confirmation.via", message }] });
  }
}

/** A form as the admin API shows it: the captcha secret is write-only. */
function formView(form: FormRecord) {
  return {
    id: form.id,
    name: form.name,
    publicKey: form.publicKey,
    allowedOrigins: form.allowedOrigins,
    verifyCaptcha: form.verifyCaptcha,
    hasCaptchaSecret: form.sealedCaptchaSecret !== null,
    enabled: form.enabled,
    honeypotField: form.honeypotField,
    redirectUrl: form.redirectUrl,
    spamRules: form.spamRules ?? null,
    confirmation: form.confirmation ?? null,
    createdAt: form.createdAt,
    updatedAt: form.updatedAt,
  };
}

/** The caller's form, or `404 Form not found`. */
export async function requireForm(db: Db, orgId: string, formId: string) {
  const form = await getForm(db, orgId, formId);
  if (form === null) throw new ApiError(ERRORS.formNotFound);
  return form;
}

/** Forms CRUD (the contract's admin table). */
export function formRoutes({ db, config }: AppDeps) {
  const router = new Hono<AdminEnv>();

  // Ids are UUIDs: a longer one names nothing, and would go over KV's key size limit.
  router.use("/forms/*", async (c, next) => {
    const [formId, sub, destId] = c.req.path.slice(c.req.path.indexOf("/forms/") + 7).split("/");
    if (formId.length > MAX_ID_LENGTH) throw new ApiError(ERRORS.formNotFound);
    if (sub === "destinations" && (destId?.length ?? 0) > MAX_ID_LENGTH) {
      throw new ApiError(ERRORS.destinationNotFound);
    }
    await next();
  });

  router.post("/forms", async (c) => {
    const settings: FormSettings = {
      ...DEFAULTS,
      ...await readValidJson(c, formCreateSchema),
    };
    assertCaptchaSecret(settings, false);
    await assertConfirmationRelay({ db, config }, null, settings.confirmation);
    const form = await createForm(db, c.get("orgId"), settings);
    return c.json({ ok: true, form: formView(form) });
  });

  // Each form with its destinations that need the owner, so the list can flag them.
  router.get("/forms", async (c) => {
    const forms = await listForms(db, c.get("orgId"));
    const alerts = await Promise.all(forms.map((form) => healthAlerts(db, form.id)));
    return c.json({
      ok: true,
      forms: forms.map((form, i) => ({ ...formView(form), destinationAlerts: alerts[i] })),
    });
  });

  router.get("/forms/:id", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    return c.json({ ok: true, form: formView(form) });
  });

  router.patch("/forms/:id", async (c) => {
    const patch = await readValidJson(c, formPatchSchema);
    await assertConfirmationRelay({ db, config }, c.req.param("id"), patch.confirmation);
    const form = await updateForm(db, c.get("orgId"), c.req.param("id"), (current) => {
      const { sealedCaptchaSecret, ...stored } = current;
      const settings: FormSettings = { ...stored, captchaSecret: undefined, ...patch };
      // The shown placeholder keeps the stored secret, as leaving it out does.
      if (settings.captchaSecret === REDACTED) settings.captchaSecret = undefined;
      assertCaptchaSecret(settings, sealedCaptchaSecret !== null);
      return settings;
    });
    if (form === null) throw new ApiError(ERRORS.formNotFound);
    return c.json({ ok: true, form: formView(form) });
  });

  router.delete("/forms/:id", async (c) => {
    if (!await deleteForm(db, c.get("orgId"), c.req.param("id"))) {
      throw new ApiError(ERRORS.formNotFound);
    }
    return c.json({ ok: true });
  });

  refuseOtherMethods(router, "/forms", "/forms/:id");
  return router;
}

/** A form as the admin API answers it (routes/forms.ts formView). */
export const formSchema = z.strictObject({
  id: z.uuid(),
  name: z.string(),
  publicKey: z.string().startsWith("pk_"),
  allowedOrigins: z.array(z.string()),
  verifyCaptcha: z.boolean(),
  hasCaptchaSecret: z.boolean().meta({ description: "captchaSecret itself is write-only" }),
  enabled: z.boolean(),
  honeypotField: z.string().nullable(),
  redirectUrl: z.string().nullable(),
  spamRules: spamRulesSchema.nullable(),
  confirmation: confirmationSchema.nullable(),
  createdAt: timestamp,
  updatedAt: timestamp,
});

/** A destination that needs its owner (store/destination_health.ts DestinationAlert). */
const destinationAlertSchema = z.strictObject({
  destinationId: z.uuid(),
  name: z.string().nullable(),
  type: z.enum(DESTINATION_TYPES),
  state: z.enum(["paused", "failing"]).meta({
    description: "paused: held until resumed; failing: failing by its own fault, retried, " +
      "and paused after DESTINATION_PAUSE_AFTER_HOURS with no delivery",
  }),
  reason: z.string().meta({ description: "Why, since when, and the last error, in words" }),
  since: timestamp,
});

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const formOperations: OperationSpec[] = [
  {
    method: "post",
    path: "/v1/admin/forms",
    summary: "Create a form",
    tag: "Admin: forms",
    admin: true,
    body: { schema: formCreateSchema, required: true },
    answers: {
      200: { description: "The form", schema: z.strictObject({ ok, form: formSchema }) },
    },
    errors: jsonBodyErrors,
  },
  {
    method: "get",
    path: "/v1/admin/forms",
    summary: "List the organization's forms, each with its destinations that are paused " +
      "or failing (destinationAlerts)",
    tag: "Admin: forms",
    admin: true,
    answers: {
      200: {
        description: "The forms",
        schema: z.strictObject({
          ok,
          forms: z.array(formSchema.extend({ destinationAlerts: z.array(destinationAlertSchema) })),
        }),
      },
    },
    errors: [],
  },
  {
    method: "get",
    path: "/v1/admin/forms/{id}",
    summary: "Read a form",
    tag: "Admin: forms",
    admin: true,
    answers: {
      200: { description: "The form", schema: z.strictObject({ ok, form: formSchema }) },
    },
    errors: FORM_404,
  },
  {
    method: "patch",
    path: "/v1/admin/forms/{id}",
    summary: "Change some of a form's settings",
    tag: "Admin: forms",
    admin: true,
    body: { schema: formPatchSchema, required: true },
    answers: {
      200: { description: "The form", schema: z.strictObject({ ok, form: formSchema }) },
    },
    errors: [...jsonBodyErrors, ...FORM_404],
  },
  {
    method: "delete",
    path: "/v1/admin/forms/{id}",
    summary: "Delete a form and its destinations",
    tag: "Admin: forms",
    admin: true,
    answers: { 200: { description: "Deleted", schema: z.strictObject({ ok }) } },
    errors: FORM_404,
  },
];
