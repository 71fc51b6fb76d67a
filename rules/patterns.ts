/**
 * Bounded patterns: the regular expressions a tenant may give (routing conditions and
 * blocked patterns). JavaScript's engine backtracks, so a pattern like `(a+)+$` takes
 * exponential time on a visitor's `aaaa…!`. Rather than run a tenant's pattern under a
 * timer, only patterns whose worst case is small are accepted, and they only ever see
 * the first MAX_MATCH_CHARS characters of a value:
 *
 * - at most MAX_PATTERN_CHARS characters;
 * - no backreferences and no lookaround (`\1`, `\k<…>`, `(?=`, `(?!`, `(?<=`, `(?<!`);
 * - no quantifier on a group that holds a quantifier or an alternation (`(a+)+`, `(a|b)*`);
 * - at most one unbounded repeat (`*`, `+`, `{n,}`, `{n,m}` with m - n > 10) and at most
 *   MAX_SMALL_REPEATS small ones (`?`, `{n,m}` with m - n ≤ 10).
 *
 * With one unbounded repeat a search costs at most about n² steps (times 2^small), so a
 * 1 000-character value costs at most a few million steps: milliseconds, never minutes.
 * And all the matching for one submission shares a budget of PATTERN_BUDGET_MS.
 *
 * @module
 */

/** Longest pattern accepted. */
export const MAX_PATTERN_CHARS = 200;
/** Characters of a value a pattern is matched against; the rest is not looked at. */
export const MAX_MATCH_CHARS = 1000;
/** Small repeats (`?`, `{n,m}` with a short range) a pattern may have. */
const MAX_SMALL_REPEATS = 3;
/**
 * Milliseconds all pattern matching for one submission may take. A submission may hold
 * thousands of values and a form up to 20 patterns: past this, the remaining tests count
 * as no match, so one submission costs at most this plus one match (bench/form_rules.ts).
 */
export const PATTERN_BUDGET_MS = 50;
/** Widest `{n,m}` range counted as small. */
const SMALL_RANGE = 10;

/** Why a pattern is refused, or null when it is accepted. */
export function patternProblem(source: string): string | null {
  if (source.length === 0) return "Empty pattern";
  if (source.length > MAX_PATTERN_CHARS) {
    return `Patterns are at most ${MAX_PATTERN_CHARS} characters`;
  }
  try {
    new RegExp(source, "iu");
  } catch {
    return "Not a valid regular expression";
  }
  // Per open group: does it hold a repeat or an alternation?
  const groups: boolean[] = [];
  let unbounded = 0;
  let small = 0;
  let inClass = false;
  /** The token before a quantifier was a group that held a repeat or alternation. */
  let lastGroupComplex = false;
  for (let i = 0; i < source.length; i++) {
    const ch = source[i];
    if (ch === "\\") {
      const next = source[i + 1] ?? "";
      if (!inClass && (/[1-9]/.test(next) || next === "k")) {
        return "Backreferences are not allowed";
      }
      i++;
      lastGroupComplex = false;
      continue;
    }
    if (inClass) {
      if (ch === "]") inClass = false;
      continue;
    }
    if (ch === "[") {
      inClass = true;
      lastGroupComplex = false;
      continue;
    }
    if (ch === "(") {
      if (/^\(\?<?[=!]/.test(source.slice(i, i + 4))) return "Lookaround is not allowed";
      groups.push(false);
      lastGroupComplex = false;
      continue;
    }
    if (ch === ")") {
      lastGroupComplex = groups.pop() ?? false;
      if (lastGroupComplex && groups.length > 0) groups[groups.length - 1] = true;
      continue;
    }
    if (ch === "|") {
      if (groups.length > 0) groups[groups.length - 1] = true;
      continue;
    }
    const repeat = quantifierAt(source, i);
    if (repeat === null) {
      lastGroupComplex = false;
      continue;
    }
    if (lastGroupComplex) return "A repeated group may not hold a repeat or an alternation";
    if (repeat.unbounded) unbounded++;
    else if (repeat.variable) small++;
    if (groups.length > 0 && repeat.variable) groups[groups.length - 1] = true;
    i = repeat.end;
    if (source[i + 1] === "?") i++; // lazy: same cost
    lastGroupComplex = false;
  }
  if (unbounded > 1) return "At most one unbounded repeat (*, + or {n,}) is allowed";
  if (small > MAX_SMALL_REPEATS) return `At most ${MAX_SMALL_REPEATS} optional parts are allowed`;
  return null;
}

/** The quantifier starting at `i`, with the index of its last character, or null. */
function quantifierAt(source: string, i: number) {
  const ch = source[i];
  if (ch === "*" || ch === "+") return { unbounded: true, variable: true, end: i };
  if (ch === "?") return { unbounded: false, variable: true, end: i };
  if (ch !== "{") return null;
  const match = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(i));
  if (match === null) return null;
  const min = Number(match[1]);
  const max = match[2] === undefined ? min : match[3] === "" ? Infinity : Number(match[3]);
  return {
    unbounded: max - min > SMALL_RANGE,
    variable: max > min,
    end: i + match[0].length - 1,
  };
}

/** Compiled patterns by source: a form's few patterns are checked and compiled once. */
const compiled = new Map<string, RegExp>();

/** A compiled bounded pattern (case-insensitive), or throws for a refused one. */
export function compilePattern(source: string): RegExp {
  let pattern = compiled.get(source);
  if (pattern !== undefined) return pattern;
  const problem = patternProblem(source);
  if (problem !== null) throw new Error(`Refused pattern: ${problem}`);
  if (compiled.size >= 10_000) compiled.clear();
  compiled.set(source, pattern = new RegExp(source, "iu"));
  return pattern;
}

/** Whether a compiled pattern matches the first MAX_MATCH_CHARS characters of `value`. */
export function matchesBounded(pattern: RegExp, value: string): boolean {
  return pattern.test(value.length > MAX_MATCH_CHARS ? value.slice(0, MAX_MATCH_CHARS) : value);
}

/** Pattern matching for one submission, within PATTERN_BUDGET_MS. */
export interface MatchBudget {
  /** matchesBounded, or false once the budget is spent. */
  matches(pattern: RegExp, value: string): boolean;
}

/** A budget of `ms` milliseconds from now (`now` for tests). */
export function matchBudget(
  ms = PATTERN_BUDGET_MS,
  now: () => number = () => performance.now(),
): MatchBudget {
  const end = now() + ms;
  return { matches: (pattern, value) => now() <= end && matchesBounded(pattern, value) };
}
