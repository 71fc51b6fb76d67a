/**
 * Placeholders in a tenant's text: `{{formName}}`, `{{submissionId}}`, `{{submittedAt}}`,
 * `{{origin}}` and `{{fields.NAME}}` (a missing field is empty), replaced by plain text,
 * through the shared template engine (template.ts) in its lenient mode: an unknown
 * placeholder stays as written. No code runs in a template.
 *
 * @module
 */

import type { SubmissionEnvelope } from "../submission.ts";
import { cutValue, isTemplateFault, parseTemplate, renderTemplate } from "../template.ts";

/** What placeholders are replaced with. */
export interface RenderValues {
  formName: string;
  submissionId: string;
  submittedAt: string;
  origin: string | null;
  /** Top-level payload fields the text may name; anything else renders empty. */
  fields: Record<string, unknown>;
  /** Longest value of a field; longer ones are cut with an ellipsis. */
  maxFieldChars: number;
}

/** Cuts a value to `max` characters with an ellipsis. */
export const cut = cutValue;

/**
 * Longest rendered text: twice the longest confirmation text, so a text that names
 * long fields many times costs no more than this.
 */
export const MAX_RENDERED_CHARS = 8000;

/** A field's value as text: strings as they are, arrays joined, anything else as JSON. */
export function fieldText(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return value.map(fieldText).join(", ");
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/**
 * `text` with its placeholders replaced; an unknown placeholder stays as written. Field
 * values are cut to `maxFieldChars`, the whole to MAX_RENDERED_CHARS.
 */
export function renderPlaceholders(text: string, values: RenderValues): string {
  const parts = parseTemplate(text, { lenient: true });
  if (isTemplateFault(parts)) return text;
  const envelope: SubmissionEnvelope = {
    submissionId: values.submissionId,
    formId: "",
    formName: values.formName,
    payload: values.fields,
    metadata: {
      origin: values.origin,
      ip: null,
      userAgent: null,
      referer: null,
      submittedAt: values.submittedAt,
    },
  };
  const rendered = renderTemplate(parts, envelope, {
    escape: (value) => value,
    fieldList: () => "",
    maxFieldChars: values.maxFieldChars,
    maxChars: MAX_RENDERED_CHARS,
  });
  return cutValue(rendered, MAX_RENDERED_CHARS);
}
