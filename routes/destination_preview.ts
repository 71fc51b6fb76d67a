/**
 * `POST /forms/:id/destinations/preview`: what a destination of a type would receive for
 * a sample submission, from an editor's unsaved config (its template, a sender name),
 * so the console shows the message before anything is saved or sent. Nothing is sent
 * or stored; only the template fields are checked (400 naming the position).
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { descriptorOf, DESTINATION_TYPES } from "../connectors/registry.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { templateSchema } from "../template.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { requireForm } from "./forms.ts";
import { readValidJson, refuseOtherMethods, validate } from "./http.ts";
import { FORM_404, jsonBodyErrors, ok, type OperationSpec } from "./operation_spec.ts";

/** Body of a preview: a type and the editor's config (secrets may be left out). */
export const destinationPreviewSchema = z.strictObject({
  type: z.enum(DESTINATION_TYPES),
  config: z.record(z.string(), z.unknown()).default({}),
});

/** The sample submission every preview shows. */
export function sampleEnvelope(form: { id: string; name: string }): SubmissionEnvelope {
  return {
    submissionId: "00000000-0000-4000-8000-000000000000",
    formId: form.id,
    formName: form.name,
    payload: {
      name: "Ada Lovelace",
      email: "ada@example.com",
      message: "Hello! Could you send me a quote for the analytical engine?",
      topics: ["pricing", "delivery"],
    },
    metadata: {
      origin: "https://www.example.com",
      ip: null,
      userAgent: null,
      referer: null,
      submittedAt: "2026-11-24T09:30:00.000Z",
    },
  };
}

/** The template fields a preview checks. */
const templates = z.object({
  template: templateSchema.optional(),
  // An SMTP subject is any text (spec); unknown placeholders stay as written.
  subjectTemplate: z.string().min(1).optional(),
});

/** The preview route. */
export function destinationPreviewRoutes({ db }: AppDeps) {
  const router = new Hono<AdminEnv>();
  router.post("/forms/:id/destinations/preview", async (c) => {
    const form = await requireForm(db, c.get("orgId"), c.req.param("id"));
    const { type, config } = await readValidJson(c, destinationPreviewSchema);
    validate(templates, config, ["config"]);
    const sample = sampleEnvelope(form);
    return c.json({ ok: true, sample, message: descriptorOf(type).preview(sample, config) });
  });
  refuseOtherMethods(router, "/forms/:id/destinations/preview");
  return router;
}

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const destinationPreviewOperations: OperationSpec[] = [
  {
    method: "post",
    path: "/v1/admin/forms/{id}/destinations/preview",
    summary: "What a destination would receive for a sample submission (nothing is sent)",
    tag: "Admin: destinations",
    admin: true,
    body: { schema: destinationPreviewSchema, required: true },
    answers: {
      200: {
        description: "The sample submission and the message the destination would get",
        schema: z.strictObject({
          ok,
          sample: z.record(z.string(), z.unknown()),
          message: z.unknown().meta({
            description: "The service's message (chat types), the subject (smtp) or the envelope",
          }),
        }),
      },
    },
    errors: [...jsonBodyErrors, ...FORM_404],
  },
];
