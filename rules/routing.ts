/**
 * Routing by field value: a destination may carry conditions on top-level payload
 * fields, all of which must hold for it to get the submission. Evaluated at acceptance,
 * when jobs are made; a form whose destinations have no conditions pays nothing.
 *
 * A field's values are its string (a number or boolean as text), or each string of an
 * array (a multi-select sends one): `equals` and `matches` hold when any value does.
 * `present` means the field is there with a non-empty value; `absent` the opposite.
 *
 * @module
 */
import { z } from "zod";
import { compilePattern, type MatchBudget, matchBudget, patternProblem } from "./patterns.ts";

const fieldName = z.string().min(1).max(100);

/** A bounded pattern (patterns.ts) as a zod schema: refused ones say why. */
export const boundedPatternSchema = z.string().superRefine((source, ctx) => {
  const problem = patternProblem(source);
  if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
});

/** One routing condition. */
export const conditionSchema = z.discriminatedUnion("op", [
  z.strictObject({
    field: fieldName,
    op: z.literal("equals"),
    values: z.array(z.string().max(1000)).min(1).max(50),
  }),
  z.strictObject({ field: fieldName, op: z.literal("matches"), pattern: boundedPatternSchema }),
  z.strictObject({ field: fieldName, op: z.literal("present") }),
  z.strictObject({ field: fieldName, op: z.literal("absent") }),
]);

/** A destination's conditions: all must hold. */
export const conditionsSchema = z.array(conditionSchema).max(10);

/** A routing condition. */
export type Condition = z.infer<typeof conditionSchema>;

/** The values of a top-level payload field (see the module doc). */
function valuesOf(payload: unknown, field: string): string[] {
  if (typeof payload !== "object" || payload === null || Array.isArray(payload)) return [];
  if (!Object.hasOwn(payload, field)) return [];
  const value = (payload as Record<string, unknown>)[field];
  const list = Array.isArray(value) ? value : [value];
  const values: string[] = [];
  for (const item of list) {
    if (typeof item === "string") values.push(item);
    else if (typeof item === "number" || typeof item === "boolean") values.push(String(item));
  }
  return values;
}

/** Whether one condition holds for a payload (patterns within the submission's budget). */
export async function conditionHolds(
  condition: Condition,
  payload: unknown,
  budget: MatchBudget,
): Promise<boolean> {
  const values = valuesOf(payload, condition.field);
  const present = values.some((value) => value.trim() !== "");
  switch (condition.op) {
    case "present":
      return present;
    case "absent":
      return !present;
    case "equals":
      return values.some((value) => condition.values.includes(value));
    case "matches":
      return await budget.anyMatches(compilePattern(condition.pattern), values);
  }
}

/**
 * The destinations that get a submission: those without conditions, and those whose
 * conditions all hold. A target not `routed` (no destination has conditions) is
 * answered with its own list, nothing evaluated. Patterns are matched in the lane of
 * `orgId` (patterns.ts).
 */
export async function matchingDestinations<T extends { conditions?: Condition[] }>(
  target: { destinations: T[]; routed: boolean },
  { payload, orgId }: { payload: unknown; orgId: string },
): Promise<T[]> {
  if (!target.routed) return target.destinations;
  const budget = matchBudget({ lane: orgId });
  const routed: T[] = [];
  for (const destination of target.destinations) {
    let holds = true;
    for (const condition of destination.conditions ?? []) {
      if (!(holds = await conditionHolds(condition, payload, budget))) break;
    }
    if (holds) routed.push(destination);
  }
  return routed;
}
