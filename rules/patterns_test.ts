import assert from "node:assert/strict";
import {
  compilePattern,
  LaneFullError,
  matchBudget,
  matchesBounded,
  MAX_LANE_WAITING,
  MAX_MATCH_CHARS,
  MAX_PATTERN_CHARS,
  patternProblem,
} from "./patterns.ts";

Deno.test("bounded patterns: everyday patterns are accepted", () => {
  for (
    const source of [
      "^(sales|support)$",
      "@example\\.(com|org)$",
      "https?://\\S+",
      "\\bviagra\\b",
      "^[a-z0-9._%+-]+@corp\\.example$",
      "^\\d{3}-\\d{4}$",
      "[(]a+[)]",
    ]
  ) assert.equal(patternProblem(source), null, source);
});

Deno.test("bounded patterns: shapes that backtrack catastrophically are refused at validation", () => {
  const refused: [string, RegExp][] = [
    ["(a+)+$", /repeated group/],
    ["(a|aa)*$", /repeated group/],
    ["(x?y?)+z", /repeated group/],
    ["((ab)*c)+", /repeated group/],
    ["(\\w+\\s?)*$", /repeated group/],
    ["a*a*b", /one unbounded/],
    ["\\d+\\d+x", /one unbounded/],
    ["a{1,50}b+", /one unbounded/],
    ["a?a?a?a?aaaa", /optional parts/],
    ["(a)\\1", /Backreferences/],
    ["(?<x>a)\\k<x>", /Backreferences/],
    ["(?=a)b", /Lookaround/],
    ["(?<!a)b", /Lookaround/],
    ["(", /valid regular expression/],
    ["", /Enter a pattern/],
    ["a".repeat(MAX_PATTERN_CHARS + 1), /at most 200/],
  ];
  for (const [source, reason] of refused) {
    assert.match(patternProblem(source) ?? "accepted", reason, source);
    assert.throws(() => compilePattern(source));
  }
});

Deno.test("bounded patterns: a value is only looked at up to MAX_MATCH_CHARS characters", () => {
  const pattern = compilePattern("x$");
  assert.equal(matchesBounded(pattern, "a".repeat(MAX_MATCH_CHARS - 1) + "x"), true);
  assert.equal(matchesBounded(pattern, "a".repeat(MAX_MATCH_CHARS) + "x"), false);
});

/** Tells, from a worker, whether `patterns` ran on `value` within `deadlineMs` (a backtracking engine does not). */
async function finishesWithin(
  patterns: { source: string; checked: boolean }[],
  value: string,
  deadlineMs: number,
): Promise<boolean[] | "timed out"> {
  const code = `
    import { compilePattern, matchesBounded } from ${
    JSON.stringify(import.meta.resolve("./patterns.ts"))
  };
    import { RE2JS } from "re2js";
    self.onmessage = ({ data }) => self.postMessage(data.patterns.map(({ source, checked }) =>
      matchesBounded(checked ? compilePattern(source) : RE2JS.compile(source, RE2JS.CASE_INSENSITIVE), data.value)));
  `;
  const url = URL.createObjectURL(new Blob([code], { type: "application/javascript" }));
  const worker = new Worker(url, { type: "module" });
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      new Promise<boolean[]>((resolve) => {
        worker.onmessage = ({ data }) => resolve(data);
        worker.postMessage({ patterns, value });
      }),
      new Promise<"timed out">((resolve) =>
        timer = setTimeout(() => resolve("timed out"), deadlineMs)
      ),
    ]);
  } finally {
    clearTimeout(timer);
    worker.terminate();
    URL.revokeObjectURL(url);
  }
}

Deno.test("tenant patterns run in linear time: accepted and catastrophic shapes on hostile values", async () => {
  // Accepted by the checker, and backtracking for minutes on a JavaScript engine.
  const accepted = ["(a|a|a|a)".repeat(22) + "!", "\\w{0,10}\\w{0,10}\\w{0,10}\\w*!"];
  for (const source of accepted) assert.equal(patternProblem(source), null, source);
  // Refused by the checker; the engine must hold even if one got through.
  const catastrophic = ["(x+x+)+y", "(.*a){12}", "([a-z]+)*$", "(a|aa)+$", "^(a?){25}a{25}$"];
  const patterns = [
    ...accepted.map((source) => ({ source, checked: true })),
    ...catastrophic.map((source) => ({ source, checked: false })),
  ];
  // A backtracking engine takes minutes on any of these; RE2 milliseconds. The deadline
  // is a bound for a busy machine, not a measurement.
  assert.deepEqual(
    await finishesWithin(patterns, "a".repeat(MAX_MATCH_CHARS), 20_000),
    [false, false, false, true, true, true, false],
  );
  assert.deepEqual(
    await finishesWithin(patterns, "x".repeat(MAX_MATCH_CHARS - 1) + "!", 20_000),
    [false, true, false, false, true, false, false],
  );
});

Deno.test("bounded patterns: the worst accepted shape on a 128 KB value looks at its first characters", () => {
  const pattern = compilePattern("a+b");
  const hostile = "a".repeat(128 * 1024);
  assert.equal(matchesBounded(pattern, hostile), false);
  assert.equal(matchesBounded(pattern, hostile.slice(0, MAX_MATCH_CHARS - 1) + "b"), true);
});

Deno.test("bounded patterns: a submission's matching stops at its budget, counting as no match", async () => {
  // A clock that moves 10 ms each time it is read: matching seems slow.
  let clock = 0;
  const now = () => clock += 10;
  const pattern = compilePattern("x");
  const values = [...Array(20).fill("a"), "x"];
  assert.equal(await matchBudget({ lane: "o", ms: 1000, now }).anyMatches(pattern, values), true);
  const budget = matchBudget({ lane: "o", ms: 50, now });
  assert.equal(await budget.anyMatches(pattern, values), false, "spent before the x");
  assert.equal(await budget.anyMatches(pattern, ["x"]), false, "spent: no more matching");
});

Deno.test("tenant patterns: matching yields to other requests and one organization matches one step at a time", async () => {
  const pattern = compilePattern("(a|a|a|a)".repeat(22) + "!");
  const values = Array.from({ length: 2000 }, (_, i) => "a".repeat(MAX_MATCH_CHARS - 1) + i);
  const order: string[] = [];
  const first = matchBudget({ lane: "org_flood", ms: 30 }).anyMatches(pattern, values)
    .then(() => order.push("flood 1"));
  const second = matchBudget({ lane: "org_flood", ms: 30 }).anyMatches(pattern, ["a!"])
    .then(() => order.push("flood 2"));
  const other = matchBudget({ lane: "org_other" }).anyMatches(pattern, ["a!"])
    .then(() => order.push("other organization"));
  setTimeout(() => order.push("another request"), 0);
  await Promise.all([first, second, other]);
  // The flood spends its 30 ms in slices: the other organization's matching and another
  // request ran in between (in either order); its own second step waited for the first.
  assert.deepEqual(order.slice(2), ["flood 1", "flood 2"]);
  assert.deepEqual(order.slice(0, 2).sort(), ["another request", "other organization"]);
});

Deno.test("tenant patterns: a full lane refuses further steps of its organization, not others'", async () => {
  const pattern = compilePattern("x");
  const values = Array.from({ length: 50 }, () => "a".repeat(MAX_MATCH_CHARS));
  const steps = Array.from(
    { length: MAX_LANE_WAITING },
    () => matchBudget({ lane: "org_full" }).anyMatches(pattern, values),
  );
  await assert.rejects(
    matchBudget({ lane: "org_full" }).anyMatches(pattern, ["x"]),
    LaneFullError,
  );
  assert.equal(await matchBudget({ lane: "org_calm" }).anyMatches(pattern, ["x"]), true);
  assert.deepEqual(new Set(await Promise.all(steps)), new Set([false]));
  assert.equal(await matchBudget({ lane: "org_full" }).anyMatches(pattern, ["x"]), true);
});
