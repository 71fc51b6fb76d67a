/**
 * The words of `400 Validation error` issues: one zod error map for every admin body,
 * query and destination config, so that a person reads "Required" or "Enter an email
 * address like name@example.com" beside the field instead of zod's own texts. Messages a
 * schema sets itself (a `.refine` text, a connector's own check) are kept.
 *
 * @module
 */
import type { z } from "zod";

/** Names of JSON types for people. */
const TYPE_NAMES: Record<string, string> = {
  string: "text",
  number: "a number",
  int: "a whole number",
  boolean: "true or false",
  array: "a list",
  object: "an object",
};

/** What each format asks for, in words with an example. */
const FORMAT_HINTS: Record<string, string> = {
  email: "Enter an email address like name@example.com",
  url: "Enter a full web address like https://www.example.com",
  datetime: "Enter a date and time like 2026-01-31T09:30:00Z",
  uuid: "Expected an id like 3f2c9a1e-5b7d-4c2a-9e1f-0a1b2c3d4e5f",
};

function plural(count: number | bigint, one: string, many: string): string {
  return `${count} ${Number(count) === 1 ? one : many}`;
}

/** zod's issues in plain words, per field. */
export const humanMessages: z.core.$ZodErrorMap = (issue) => {
  switch (issue.code) {
    case "invalid_type":
      if (issue.input === undefined || issue.input === null) return "Required";
      return `Expected ${TYPE_NAMES[issue.expected] ?? issue.expected}`;
    case "too_small": {
      const min = issue.minimum;
      if (issue.origin === "string") {
        return Number(min) <= 1 ? "Required" : `At least ${plural(min, "character", "characters")}`;
      }
      if (issue.origin === "array" || issue.origin === "set") {
        return Number(min) <= 1 ? "Add at least one" : `Add at least ${min}`;
      }
      return issue.inclusive ? `At least ${min}` : `More than ${min}`;
    }
    case "too_big": {
      const max = issue.maximum;
      if (issue.origin === "string") return `At most ${plural(max, "character", "characters")}`;
      if (issue.origin === "array" || issue.origin === "set") {
        return `At most ${plural(max, "entry", "entries")}`;
      }
      return issue.inclusive ? `At most ${max}` : `Less than ${max}`;
    }
    case "invalid_format":
      return FORMAT_HINTS[issue.format] ?? `Not in the expected format (${issue.format})`;
    case "invalid_value":
      return issue.values.length === 1
        ? `Must be ${JSON.stringify(issue.values[0])}`
        : `Choose one of: ${issue.values.map((v) => String(v)).join(", ")}`;
    case "unrecognized_keys":
      return `Unknown ${issue.keys.length === 1 ? "field" : "fields"}: ${
        issue.keys.join(", ")
      } (check the spelling)`;
    case "not_multiple_of":
      return `Must be a multiple of ${issue.divisor}`;
    default:
      return undefined;
  }
};
