import { strictUtf8 } from "../bytes.ts";
import { Refusal } from "./refusal.ts";

/** The body formats ingestion accepts. */
export type BodyKind = "json" | "urlencoded" | "multipart";

/** Deepest JSON nesting accepted: deeper bodies are refused before anything walks them. */
export const MAX_JSON_DEPTH = 100;
/** Most form fields accepted in one urlencoded or multipart body. */
const MAX_FORM_FIELDS = 1000;

/** The body kind of a Content-Type header, or null when this deployment does not take it. */
export function bodyKind(
  contentType: string | undefined,
  variant: "any" | "json",
): BodyKind | null {
  const mediaType = (contentType ?? "").split(";", 1)[0].trim().toLowerCase();
  if (mediaType === "application/json") return "json";
  if (variant === "json") return null;
  if (mediaType === "application/x-www-form-urlencoded") return "urlencoded";
  if (mediaType === "multipart/form-data") return "multipart";
  return null;
}

/** Parses a capped body into the envelope's payload; throws the contract's 400s. */
export async function parsePayload(
  kind: BodyKind,
  bytes: Uint8Array<ArrayBuffer>,
  options: { contentType: string; variant: "any" | "json" },
): Promise<unknown> {
  if (kind === "json") return parseJson(bytes, options.variant);
  if (kind === "urlencoded") return parseUrlEncoded(bytes);
  return await parseMultipart(bytes, options.contentType);
}

function invalidJson(detail?: string): Refusal {
  return new Refusal("invalidJsonPayload", { detail });
}

function invalidForm(detail?: string): Refusal {
  return new Refusal("invalidFormPayload", { detail });
}

const tooManyFields = () => invalidForm(`More than ${MAX_FORM_FIELDS} fields`);

function parseJson(bytes: Uint8Array, variant: "any" | "json"): unknown {
  if (jsonDepth(bytes) > MAX_JSON_DEPTH) {
    throw invalidJson(`Nested deeper than ${MAX_JSON_DEPTH} levels`);
  }
  let value: unknown;
  try {
    value = JSON.parse(strictUtf8.decode(bytes));
  } catch {
    throw invalidJson();
  }
  if (variant === "json" && (typeof value !== "object" || value === null || Array.isArray(value))) {
    throw invalidJson("Expected a JSON object");
  }
  return value;
}

/** Deepest bracket nesting outside strings; a byte scan, so hostile depth costs nothing. */
function jsonDepth(bytes: Uint8Array): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (inString) {
      if (b === 0x5c) i++; // backslash: skip the escaped byte
      else if (b === 0x22) inString = false;
    } else if (b === 0x22) {
      inString = true;
    } else if (b === 0x5b || b === 0x7b) {
      if (++depth > max) max = depth;
    } else if (b === 0x5d || b === 0x7d) {
      depth--;
    }
  }
  return max;
}

/**
 * Control characters but tab, line feed and carriage return. A form field typed by a
 * person has none, and JSON writes each as six bytes (`\u0001`): 128 KB of them made a
 * 786 KB envelope for every destination.
 */
// deno-lint-ignore no-control-regex -- control characters are what is matched here
const FIELD_CONTROLS = /[\x00-\x08\x0b\x0c\x0e-\x1f]/g;

/** A form field's name or value without control characters (see FIELD_CONTROLS). */
function fieldText(text: string): string {
  return text.replace(FIELD_CONTROLS, "");
}

/**
 * Fields sent once are strings, fields sent more than once arrays of strings (CONTRACT);
 * names and values lose their control characters but tab, line feed and carriage return.
 */
function normalizeFields(entries: Iterable<[string, string]>): Record<string, string | string[]> {
  const fields = new Map<string, string | string[]>();
  let count = 0;
  for (const [rawName, rawValue] of entries) {
    const name = fieldText(rawName);
    const value = fieldText(rawValue);
    if (++count > MAX_FORM_FIELDS) throw tooManyFields();
    const previous = fields.get(name);
    if (previous === undefined) fields.set(name, value);
    else if (Array.isArray(previous)) previous.push(value);
    else fields.set(name, [previous, value]);
  }
  // fromEntries defines own properties, so a "__proto__" field stays a plain field.
  return Object.fromEntries(fields);
}

function parseUrlEncoded(bytes: Uint8Array): Record<string, string | string[]> {
  let text: string;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    throw invalidForm("Not valid UTF-8");
  }
  const decode = (part: string) => {
    try {
      return decodeURIComponent(part.replaceAll("+", " "));
    } catch {
      throw invalidForm("Invalid percent-encoding");
    }
  };
  // An array, not a generator: resuming one per field took about a third of the parse.
  const entries: [string, string][] = [];
  for (const pair of text.split("&")) {
    if (pair === "") continue;
    // Refused before the rest is decoded: a hostile body of tiny fields costs little.
    if (entries.length === MAX_FORM_FIELDS) throw tooManyFields();
    const eq = pair.indexOf("=");
    entries.push(
      eq === -1 ? [decode(pair), ""] : [decode(pair.slice(0, eq)), decode(pair.slice(eq + 1))],
    );
  }
  return normalizeFields(entries);
}

async function parseMultipart(
  bytes: Uint8Array<ArrayBuffer>,
  contentType: string,
): Promise<Record<string, string | string[]>> {
  const boundary = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  if (boundary === null) throw invalidForm("Multipart body without boundary");
  // The runtime's parser accepts a body cut short; a complete one ends with the close delimiter.
  const closing = `--${boundary[1] ?? boundary[2]}--`;
  if (!new TextDecoder("latin1").decode(bytes).includes(closing)) {
    throw invalidForm("Multipart body is incomplete");
  }
  let form: FormData;
  try {
    form = await new Response(bytes, { headers: { "content-type": contentType } }).formData();
  } catch {
    throw invalidForm();
  }
  const entries: [string, string][] = [];
  for (const [name, value] of form) {
    if (typeof value !== "string") throw new Refusal("fileUpload");
    entries.push([name, value]);
  }
  return normalizeFields(entries);
}

/**
 * Whether a submission filled the honeypot field; the field is removed from the
 * payload either way, so a real submission never carries it.
 */
export function takeHoneypot(payload: unknown, field: string): boolean {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return false;
  const fields = payload as Record<string, unknown>;
  if (!Object.hasOwn(fields, field)) return false;
  const value = fields[field];
  delete fields[field];
  if (Array.isArray(value)) return value.some((v) => v !== "" && v !== null);
  return value !== "" && value !== null && value !== undefined && value !== false;
}
