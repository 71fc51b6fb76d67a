import assert from "node:assert/strict";
import { type Condition, conditionsSchema, routeSubmission } from "./routing.ts";

const sales = { id: "sales", conditions: [{ field: "topic", op: "equals", values: ["sales"] }] };
const support = {
  id: "support",
  conditions: [{ field: "topic", op: "matches", pattern: "^(support|help)$" }],
};
const everything = { id: "all" };
const target = (...destinations: { id: string; conditions?: Condition[] }[]) => ({
  destinations,
  routed: destinations.some((d) => d.conditions !== undefined),
});
const ids = (list: { id: string }[]) => list.map((d) => d.id);

Deno.test("routing: equals one of a list, a pattern, and destinations without conditions", () => {
  const routes = target(sales as never, support as never, everything);
  assert.deepEqual(ids(routeSubmission(routes, { topic: "sales" })), ["sales", "all"]);
  assert.deepEqual(ids(routeSubmission(routes, { topic: "HELP" })), ["support", "all"]);
  assert.deepEqual(ids(routeSubmission(routes, { topic: "other" })), ["all"]);
  // A multi-select sends an array: any value counts.
  assert.deepEqual(ids(routeSubmission(routes, { topic: ["x", "sales"] })), ["sales", "all"]);
});

Deno.test("routing: present and absent, and every condition must hold", () => {
  const phone = {
    id: "phone",
    conditions: [
      { field: "phone", op: "present" },
      { field: "company", op: "absent" },
    ] as Condition[],
  };
  const routes = target(phone);
  assert.deepEqual(ids(routeSubmission(routes, { phone: "123" })), ["phone"]);
  assert.deepEqual(ids(routeSubmission(routes, { phone: "123", company: "ACME" })), []);
  assert.deepEqual(ids(routeSubmission(routes, { phone: "  " })), [], "blank is not present");
  assert.deepEqual(ids(routeSubmission(routes, {})), [], "an absent field matches nothing");
  assert.deepEqual(ids(routeSubmission(routes, "not an object")), []);
});

Deno.test("routing: no match leaves no destination; an unrouted target is answered with its own list", () => {
  assert.deepEqual(routeSubmission(target(sales as never), { topic: "support" }), []);
  const plain = target(everything);
  assert.equal(routeSubmission(plain, { topic: "x" }), plain.destinations);
});

Deno.test("routing conditions are validated: unknown ops and unbounded patterns are refused", () => {
  assert.equal(conditionsSchema.safeParse([sales.conditions[0]]).success, true);
  const bad = conditionsSchema.safeParse([{ field: "t", op: "matches", pattern: "(a+)+$" }]);
  assert.equal(bad.success, false);
  assert.match(bad.error!.issues[0].message, /repeated group/);
  assert.equal(conditionsSchema.safeParse([{ field: "t", op: "contains" }]).success, false);
  assert.equal(
    conditionsSchema.safeParse([{ field: "t", op: "equals", values: [] }]).success,
    false,
  );
});
