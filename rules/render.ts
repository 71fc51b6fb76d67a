/**
 * Placeholders in a tenant's text: `{{formName}}`, `{{submissionId}}`, `{{submittedAt}}`,
 * `{{origin}}` and `{{fields.NAME}}` (a missing field is empty), replaced by plain text.
 * One small function, so that it can be pointed at the shared template engine when it
 * exists; no code runs in a template.
 *
 * @module
 */

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
export function cut(value: string, max: number): string {
  return value.length > max ? `${value.slice(0, max - 1)}…` : value;
}

/** A field's value as text: strings as they are, arrays joined, anything else as JSON. */
export function fieldText(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return value.map(fieldText).join(", ");
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/** `text` with its placeholders replaced; an unknown placeholder stays as written. */
export function renderPlaceholders(text: string, values: RenderValues): string {
  return text.replace(/\{\{\s*([A-Za-z]+)(?:\.([^{}\s]{1,100}))?\s*\}\}/g, (whole, name, field) => {
    switch (name) {
      case "formName":
      case "submissionId":
      case "submittedAt":
        return field === undefined ? values[name as "formName"] : whole;
      case "origin":
        return field === undefined ? values.origin ?? "" : whole;
      case "fields":
        if (field === undefined || !Object.hasOwn(values.fields, field)) return "";
        return cut(fieldText(values.fields[field]), values.maxFieldChars);
      default:
        return whole;
    }
  });
}
