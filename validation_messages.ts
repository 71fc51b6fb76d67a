/**
 * The words of `400 Validation error` issues: one zod error map for every admin body,
 * query and destination config, so that a person reads "This field is required" or "Enter an email
 * address like name@example.com" beside the field instead of zod's own texts. Messages a
 * schema sets itself (a `.refine` text, a connector's own check) are kept.
 *
 * @module
 */
import type { z } from "zod";

/** What to enter for each JSON type, for people. */
const TYPE_NAMES: Record<string, string> = {
  string: "Enter text",
  number: "Enter a number",
  int: "Enter a whole number",
  boolean: "Enter true or false",
  array: "Give a list",
  object: "Give an object",
};

/** What each format asks for, in words with an example. */
const FORMAT_HINTS: Record<string, string> = {
  email: "Enter an email address like name@example.com",
  url: "Enter a full web address like https://www.example.com",
  datetime: "Enter a date and time like 2026-01-31T09:30:00Z",
  uuid: "Enter an id like 3f2c9a1e-5b7d-4c2a-9e1f-0a1b2c3d4e5f",
};

/** The message for a value that must be given. */
export const REQUIRED = "This field is required";

function plural(count: number | bigint, one: string, many: string): string {
  return `${count} ${Number(count) === 1 ? one : many}`;
}

/**
 * zod's issues in plain words, per field: each a whole sentence (sentence case, no
 * trailing period, as the house's messages are), so none reads as cut off.
 */
export const humanMessages: z.core.$ZodErrorMap = (issue) => {
  switch (issue.code) {
    case "invalid_type":
      if (issue.input === undefined || issue.input === null) return REQUIRED;
      return `${TYPE_NAMES[issue.expected] ?? `Enter a value of type ${issue.expected}`} here`;
    case "too_small": {
      const min = issue.minimum;
      if (issue.origin === "string") {
        return Number(min) <= 1
          ? REQUIRED
          : `Enter at least ${plural(min, "character", "characters")}`;
      }
      if (issue.origin === "array" || issue.origin === "set") {
        return Number(min) <= 1 ? "Add at least one entry" : `Add at least ${min} entries`;
      }
      return issue.inclusive ? `Enter ${min} or more` : `Enter more than ${min}`;
    }
    case "too_big": {
      const max = issue.maximum;
      if (issue.origin === "string") {
        return `Enter at most ${plural(max, "character", "characters")}`;
      }
      if (issue.origin === "array" || issue.origin === "set") {
        return `Give at most ${plural(max, "entry", "entries")}`;
      }
      return issue.inclusive ? `Enter ${max} or less` : `Enter less than ${max}`;
    }
    case "invalid_format":
      return FORMAT_HINTS[issue.format] ?? `Enter it in the expected format (${issue.format})`;
    case "invalid_value":
      return issue.values.length === 1
        ? `The only value allowed here is ${JSON.stringify(issue.values[0])}`
        : `Choose one of: ${issue.values.map((v) => String(v)).join(", ")}`;
    case "unrecognized_keys":
      return `${issue.keys.length === 1 ? "This field is" : "These fields are"} not known: ${
        issue.keys.join(", ")
      } (check the spelling)`;
    case "invalid_key":
      // A record's key (a header name): its own check says what is wrong.
      return issue.issues[0]?.message ?? "This name is not allowed here";
    case "not_multiple_of":
      return `Enter a multiple of ${issue.divisor}`;
    default:
      return undefined;
  }
};
