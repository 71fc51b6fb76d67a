import assert from "node:assert/strict";
import {
  compilePattern,
  matchBudget,
  matchesBounded,
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
    ["", /Empty/],
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

Deno.test("bounded patterns: the worst accepted shape on a hostile value does a bounded number of steps", () => {
  // One unbounded repeat that fails at the end of every start position: about n² / 2
  // steps for the MAX_MATCH_CHARS characters looked at, whatever the value's length.
  const pattern = compilePattern("a+b");
  const hostile = "a".repeat(128 * 1024);
  assert.equal(matchesBounded(pattern, hostile), false);
  // The refused shape is the one whose steps double with each character.
  assert.notEqual(patternProblem("(a+)+b"), null);
});

Deno.test("bounded patterns: a submission's matching stops at its budget, counting as no match", () => {
  let clock = 0;
  const budget = matchBudget(50, () => clock);
  const pattern = compilePattern("x");
  assert.equal(budget.matches(pattern, "x"), true);
  clock = 50;
  assert.equal(budget.matches(pattern, "x"), true, "still within");
  clock = 51;
  assert.equal(budget.matches(pattern, "x"), false, "spent: no more matching");
});
