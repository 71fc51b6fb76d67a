import assert from "node:assert/strict";
import { type Condition, conditionsSchema, matchingDestinations } from "./routing.ts";

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
const orgId = "org_routing";
const ids = (list: { id: string }[]) => list.map((d) => d.id);

Deno.test("routing: equals one of a list, a pattern, and destinations without conditions", async () => {
  const routes = target(sales as never, support as never, everything);
  assert.deepEqual(
    ids(await matchingDestinations(routes, { payload: { topic: "sales" }, orgId })),
    [
      "sales",
      "all",
    ],
  );
  assert.deepEqual(ids(await matchingDestinations(routes, { payload: { topic: "HELP" }, orgId })), [
    "support",
    "all",
  ]);
  assert.deepEqual(
    ids(await matchingDestinations(routes, { payload: { topic: "other" }, orgId })),
    [
      "all",
    ],
  );
  // A multi-select sends an array: any value counts.
  assert.deepEqual(
    ids(await matchingDestinations(routes, { payload: { topic: ["x", "sales"] }, orgId })),
    ["sales", "all"],
  );
});

Deno.test("routing: present and absent, and every condition must hold", async () => {
  const phone = {
    id: "phone",
    conditions: [
      { field: "phone", op: "present" },
      { field: "company", op: "absent" },
    ] as Condition[],
  };
  const routes = target(phone);
  assert.deepEqual(ids(await matchingDestinations(routes, { payload: { phone: "123" }, orgId })), [
    "phone",
  ]);
  assert.deepEqual(
    ids(await matchingDestinations(routes, { payload: { phone: "123", company: "ACME" }, orgId })),
    [],
  );
  assert.deepEqual(
    ids(await matchingDestinations(routes, { payload: { phone: "  " }, orgId })),
    [],
    "blank is not present",
  );
  assert.deepEqual(
    ids(await matchingDestinations(routes, { payload: {}, orgId })),
    [],
    "an absent field matches nothing",
  );
  assert.deepEqual(
    ids(await matchingDestinations(routes, { payload: "not an object", orgId })),
    [],
  );
});

Deno.test("routing: no match leaves no destination; an unrouted target is answered with its own list", async () => {
  const unmatched = { payload: { topic: "support" }, orgId };
  assert.deepEqual(await matchingDestinations(target(sales as never), unmatched), []);
  const plain = target(everything);
  assert.equal(
    await matchingDestinations(plain, { payload: { topic: "x" }, orgId }),
    plain.destinations,
  );
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
