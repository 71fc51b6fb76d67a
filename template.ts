/**
 * Message templates: a tenant's text with placeholders, and nothing else (no code runs
 * in a template, so no sandbox is needed). Placeholders: `{{formName}}`,
 * `{{submissionId}}`, `{{submittedAt}}`, `{{origin}}`, `{{fields.NAME}}` (a top-level
 * payload field; empty when missing) and `{{fields}}` (the field list the destination
 * would show without a template). Spaces inside the braces are allowed.
 *
 * Rendering escapes the values, never the tenant's own text: each destination passes its
 * own escaping (Slack's `&<>`, Telegram's HTML, an email header's encoding…), so a
 * visitor's `<!channel>` stays text while the tenant's own markup works.
 *
 * @module
 */
import { z } from "zod";
import type { SubmissionEnvelope } from "./submission.ts";

/** Longest template, in characters. */
export const MAX_TEMPLATE_CHARS = 4096;

/**
 * A template config field: at most 4 KB of text whose placeholders are all known; an
 * unknown one is a validation issue naming its line and column.
 */
export const templateSchema = z.string().max(MAX_TEMPLATE_CHARS).superRefine((value, ctx) => {
  const parsed = parseTemplate(value);
  if (isTemplateFault(parsed)) ctx.addIssue({ code: "custom", message: describeFault(parsed) });
});

/** The placeholders other than `fields.NAME`. */
const NAMES = ["formName", "submissionId", "submittedAt", "origin", "fields"] as const;

/** One piece of a parsed template. */
export type TemplatePart =
  | { text: string }
  | { name: typeof NAMES[number] }
  | { field: string };

/** A template that is not valid, with where: line and column (1-based) of the fault. */
export interface TemplateFault {
  message: string;
  line: number;
  column: number;
}

const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/y;

/** Line and column (1-based) of an offset in a text. */
function positionOf(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset).split("\n");
  return { line: before.length, column: before[before.length - 1].length + 1 };
}

/**
 * Parses a template into its parts.
 *
 * @param options.lenient keep an unknown placeholder or an unclosed `{{` as text instead
 *   of a fault (for texts checked elsewhere, or stored before placeholders were checked)
 * @returns the parts, or the first fault: an unknown placeholder, or `{{` never closed
 */
export function parseTemplate(
  template: string,
  options: { lenient?: boolean } = {},
): TemplatePart[] | TemplateFault {
  const parts: TemplatePart[] = [];
  let text = "";
  let i = 0;
  while (i < template.length) {
    const open = template.indexOf("{{", i);
    if (open < 0) {
      text += template.slice(i);
      break;
    }
    text += template.slice(i, open);
    PLACEHOLDER.lastIndex = open;
    const match = PLACEHOLDER.exec(template);
    const at = positionOf(template, open);
    if (match === null) {
      if (!options.lenient) return { message: 'A "{{" is not closed by "}}"', ...at };
      text += template.slice(open);
      break;
    }
    const inner = match[1];
    let part: TemplatePart;
    if ((NAMES as readonly string[]).includes(inner)) {
      part = { name: inner as typeof NAMES[number] };
    } else if (/^fields\.[^\s{}]+$/.test(inner)) {
      part = { field: inner.slice("fields.".length) };
    } else if (options.lenient) {
      text += match[0];
      i = open + match[0].length;
      continue;
    } else {
      return {
        message: `Unknown placeholder "{{${inner}}}": use {{formName}}, {{submissionId}}, ` +
          "{{submittedAt}}, {{origin}}, {{fields}} or {{fields.NAME}}",
        ...at,
      };
    }
    if (text !== "") parts.push({ text });
    text = "";
    parts.push(part);
    i = open + match[0].length;
  }
  if (text !== "") parts.push({ text });
  return parts;
}

/** Whether parseTemplate's answer is a fault. */
export function isTemplateFault(parsed: TemplatePart[] | TemplateFault): parsed is TemplateFault {
  return !Array.isArray(parsed);
}

/** The message of a fault with its place: `Unknown placeholder … (line 1, column 5)`. */
export function describeFault(fault: TemplateFault): string {
  return `${fault.message} (line ${fault.line}, column ${fault.column})`;
}

/**
 * The payload's top-level fields as `[name, value text]` in the order received; a
 * payload that is not an object is one field named "payload".
 */
export function payloadFields(payload: unknown): [string, string][] {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
    return payload === undefined ? [] : [["payload", valueText(payload)]];
  }
  return Object.entries(payload).map(([name, value]) => [name, valueText(value)]);
}

/** A field's value as text: strings as they are, arrays joined, nested values as compact JSON. */
export function valueText(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) {
    return value.map((item) => typeof item === "string" ? item : JSON.stringify(item)).join(", ");
  }
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/** How a destination renders values into a template. */
export interface TemplateStyle {
  /** Escapes one value for the destination (its markup, a header's encoding…). */
  escape(value: string): string;
  /** `{{fields}}`: the destination's own field list, already escaped. */
  fieldList(): string;
  /** Shapes a `{{fields.NAME}}` value before it is escaped (e.g. cuts it). */
  fieldValue?(text: string): string;
}

/** Renders a parsed template for an envelope: the tenant's text as written, values escaped. */
export function renderTemplate(
  parts: TemplatePart[],
  envelope: SubmissionEnvelope,
  style: TemplateStyle,
): string {
  const payload = typeof envelope.payload === "object" && envelope.payload !== null
    ? envelope.payload as Record<string, unknown>
    : {};
  return parts.map((part) => {
    if ("text" in part) return part.text;
    if ("field" in part) {
      if (!Object.hasOwn(payload, part.field)) return "";
      const text = valueText(payload[part.field]);
      return style.escape(style.fieldValue ? style.fieldValue(text) : text);
    }
    switch (part.name) {
      case "formName":
        return style.escape(envelope.formName);
      case "submissionId":
        return style.escape(envelope.submissionId);
      case "submittedAt":
        return style.escape(envelope.metadata.submittedAt);
      case "origin":
        return style.escape(envelope.metadata.origin ?? "");
      case "fields":
        return style.fieldList();
    }
  }).join("");
}
