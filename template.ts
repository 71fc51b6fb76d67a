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
 * Rendering costs what the destination can show, however often a template names a value:
 * values are cut before escaping, worked out once, and rendering stops at the limit.
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
    if (match === null) {
      if (!options.lenient) {
        return { message: 'A "{{" is not closed by "}}"', ...positionOf(template, open) };
      }
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
        ...positionOf(template, open),
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

/** The ellipsis every cut ends with. */
export const ELLIPSIS = "…";

/**
 * `text` cut to at most `max` characters, ending with an ellipsis when cut, never between
 * the two halves of a surrogate pair.
 */
export function cutValue(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = Math.max(0, max - 1);
  if (end > 0 && /[\uD800-\uDBFF]/.test(text[end - 1])) end--;
  return text.slice(0, end) + ELLIPSIS.slice(0, max);
}

/** How a destination renders values into a template, and how much it can show. */
export interface TemplateStyle {
  /** Escapes one value for the destination (its markup, a header's encoding…). */
  escape(value: string): string;
  /** `{{fields}}`: the destination's own field list, already escaped. */
  fieldList(): string;
  /** Longest `{{fields.NAME}}` value, before escaping; a longer one is cut with an ellipsis. */
  maxFieldChars: number;
  /** Where rendering stops: no part is added once the text is longer than this. */
  maxChars: number;
}

/**
 * Renders a parsed template for an envelope: the tenant's text as written, values escaped.
 * The work is bounded by what the destination can show, whatever the template and the
 * payload: each field value is cut before it is escaped, each value (and `{{fields}}`) is
 * worked out once however often the template names it, and rendering stops after the
 * part that takes the text past `style.maxChars`. So the result is longer than
 * `maxChars` only when something was left out, by at most one part: the caller cuts it
 * where its markup allows (connectors/chat/common.ts `cutMarkup`).
 */
export function renderTemplate(
  parts: TemplatePart[],
  envelope: SubmissionEnvelope,
  style: TemplateStyle,
): string {
  const payload = typeof envelope.payload === "object" && envelope.payload !== null
    ? envelope.payload as Record<string, unknown>
    : {};
  // One escaped value per placeholder however often the template repeats it.
  const values = new Map<string, string>();
  const valueOf = (part: Exclude<TemplatePart, { text: string }>): string => {
    const key = "field" in part ? `fields.${part.field}` : part.name;
    let value = values.get(key);
    if (value === undefined) {
      value = renderValue(part, envelope, payload, style);
      values.set(key, value);
    }
    return value;
  };
  const pieces: string[] = [];
  let length = 0;
  for (const part of parts) {
    if (length > style.maxChars) break;
    const piece = "text" in part ? part.text : valueOf(part);
    pieces.push(piece);
    length += piece.length;
  }
  return pieces.join("");
}

/** Characters escaped at a time by escapeWithin. */
const ESCAPE_SLICE = 1024;

/**
 * `escape(text)`, or only as much of it as takes it past `max` characters: escaping grows
 * text (`&` → `&amp;`), and what lies past the limit is never shown.
 */
function escapeWithin(text: string, max: number, escape: (text: string) => string): string {
  if (text.length <= ESCAPE_SLICE) return escape(text);
  let escaped = "";
  for (let at = 0; at < text.length && escaped.length <= max; at += ESCAPE_SLICE) {
    escaped += escape(text.slice(at, at + ESCAPE_SLICE));
  }
  return escaped;
}

/** One placeholder's value, escaped for the destination (fields cut first). */
function renderValue(
  part: Exclude<TemplatePart, { text: string }>,
  envelope: SubmissionEnvelope,
  payload: Record<string, unknown>,
  style: TemplateStyle,
): string {
  if ("field" in part) {
    if (!Object.hasOwn(payload, part.field)) return "";
    const text = cutValue(valueText(payload[part.field]), style.maxFieldChars);
    return escapeWithin(text, style.maxChars, style.escape);
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
}
