/**
 * Tenant patterns: the regular expressions a tenant may give (routing conditions and
 * blocked patterns), run on a shared thread against what strangers send.
 *
 * They run on RE2's JavaScript port (`re2js`), whose matching time is linear in the
 * input whatever the pattern: no backtracking, so no pattern can freeze the process,
 * and it needs no V8 flag (Deno Deploy takes none). Every match looks at the first
 * MAX_MATCH_CHARS characters of a value at most, so one match is bounded by
 * construction; the budget and the lanes below bound a submission and an organization.
 *
 * The checker (`patternProblem`) is kept for size and clarity, not as the guard: at
 * most MAX_PATTERN_CHARS characters, RE2's syntax (no backreferences, no lookaround),
 * no quantifier on a group that holds a quantifier or an alternation, at most one
 * unbounded repeat and MAX_SMALL_REPEATS small ones. Patterns a person can read.
 *
 * Budgets: the matching for one submission step (its spam patterns, or its routing)
 * may spend PATTERN_BUDGET_MS of matching time; past it, the remaining tests count as
 * no match. One organization's matching runs one step at a time (its lane), in slices
 * of SLICE_MS that yield to other requests, and at most ORG_SHARE_MS in a second: a
 * flood of the costliest submissions aimed at one form holds the thread a slice at a
 * time and waits in its own lane, while other organizations' requests go on between
 * slices (bench:rules-flood).
 *
 * @module
 */
import { RE2JS } from "re2js";

/** Longest pattern accepted. */
export const MAX_PATTERN_CHARS = 200;
/** Characters of a value a pattern is matched against; the rest is not looked at. */
export const MAX_MATCH_CHARS = 1000;
/** Small repeats (`?`, `{n,m}` with a short range) a pattern may have. */
const MAX_SMALL_REPEATS = 3;
/**
 * Milliseconds of matching one submission step may spend. A submission may hold
 * thousands of values and a form up to 20 patterns: past this, the remaining tests count
 * as no match (bench/form_rules.ts measures the worst case).
 */
export const PATTERN_BUDGET_MS = 50;
/** Milliseconds of matching before yielding the thread to other requests. */
export const SLICE_MS = 2;
/** Widest `{n,m}` range counted as small. */
const SMALL_RANGE = 10;

/** A compiled tenant pattern: case-insensitive, linear-time. */
export type Pattern = RE2JS;

/** Why a pattern is refused, or null when it is accepted. */
export function patternProblem(source: string): string | null {
  if (source.length === 0) return "Enter a pattern";
  if (source.length > MAX_PATTERN_CHARS) {
    return `Patterns are at most ${MAX_PATTERN_CHARS} characters`;
  }
  // Lookaround and backreferences are named here (RE2 refuses them less plainly).
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
  try {
    RE2JS.compile(source, RE2JS.CASE_INSENSITIVE);
  } catch {
    return "This is not a valid regular expression";
  }
  if (unbounded > 1) return "A pattern can have at most one unbounded repeat (*, + or {n,})";
  if (small > MAX_SMALL_REPEATS) {
    return `A pattern can have at most ${MAX_SMALL_REPEATS} optional parts`;
  }
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
const compiled = new Map<string, Pattern>();

/** A compiled pattern (case-insensitive), or throws for a refused one. */
export function compilePattern(source: string): Pattern {
  let pattern = compiled.get(source);
  if (pattern !== undefined) return pattern;
  const problem = patternProblem(source);
  if (problem !== null) throw new Error(`Refused pattern: ${problem}`);
  if (compiled.size >= 10_000) compiled.clear();
  compiled.set(source, pattern = RE2JS.compile(source, RE2JS.CASE_INSENSITIVE));
  return pattern;
}

/** Whether a pattern matches somewhere in the first MAX_MATCH_CHARS characters of `value`. */
export function matchesBounded(pattern: Pattern, value: string): boolean {
  return pattern.test(value.length > MAX_MATCH_CHARS ? value.slice(0, MAX_MATCH_CHARS) : value);
}

/** The matching of one submission step, within its budget. */
export interface MatchBudget {
  /**
   * Whether any of `values` matches `pattern` (matchesBounded); false for whatever is
   * left once the budget is spent. Runs in the budget's lane, a slice at a time.
   */
  anyMatches(pattern: Pattern, values: readonly string[]): Promise<boolean>;
}

/**
 * Milliseconds of matching one organization may spend in each second: past it, its
 * matching waits for the next second and the thread is left to everyone else.
 */
export const ORG_SHARE_MS = 250;
const ORG_WINDOW_MS = 1000;
/**
 * Submission steps that may wait in one organization's lane: past it, a flood's further
 * submissions are refused (LaneFullError) rather than held, each with its body.
 */
export const MAX_LANE_WAITING = 100;

/** An organization's matching lane is full: its submission is refused, to be sent again. */
export class LaneFullError extends Error {
  constructor() {
    super("Too much matching waiting for this organization");
  }
}

/**
 * An organization's lane: the tail of its matching, its share of the current second, and
 * when its current slice began. The slice is the lane's, not one step's: the steps of a
 * lane follow one another without a pause, so a slice spans them (a flood's many short
 * steps would otherwise hold the thread end to end).
 */
interface Lane {
  tail: Promise<unknown>;
  windowStart: number;
  used: number;
  sliceStart: number;
  /** Steps queued or running. */
  waiting: number;
}

const lanes = new Map<string, Lane>();

/** Drops the lanes with nothing waiting whose second is over (they hold nothing to keep). */
function forgetIdleLanes(at: number) {
  for (const [name, lane] of lanes) {
    if (lane.waiting === 0 && at - lane.windowStart >= ORG_WINDOW_MS) lanes.delete(name);
  }
}

/** Runs `work` after the lane's earlier work, so one lane never matches twice at once. */
function inLane<T>(name: string, now: () => number, work: (lane: Lane) => Promise<T>): Promise<T> {
  if (!lanes.has(name) && lanes.size >= 10_000) forgetIdleLanes(now());
  const lane = lanes.get(name) ??
    { tail: Promise.resolve(), windowStart: now(), used: 0, sliceStart: now(), waiting: 0 };
  if (lane.waiting >= MAX_LANE_WAITING) return Promise.reject(new LaneFullError());
  lanes.set(name, lane);
  lane.waiting++;
  const run = lane.tail.then(() => work(lane)).finally(() => lane.waiting--);
  const tail = lane.tail = run.catch(() => {});
  tail.then(() => {
    // An idle lane is forgotten once its second is over: nothing of its share is left to keep.
    if (lane.tail === tail && now() - lane.windowStart >= ORG_WINDOW_MS) lanes.delete(name);
  });
  return run;
}

/**
 * Between two slices: gives the thread to other requests, and when the lane has used its
 * share of this second, waits for the next. Starts the lane's next slice.
 */
async function betweenSlices(lane: Lane, now: () => number): Promise<void> {
  let at = now();
  if (at - lane.windowStart >= ORG_WINDOW_MS) Object.assign(lane, { windowStart: at, used: 0 });
  if (lane.used >= ORG_SHARE_MS) {
    await new Promise((resolve) => setTimeout(resolve, lane.windowStart + ORG_WINDOW_MS - at));
    at = now();
    Object.assign(lane, { windowStart: at, used: 0 });
  } else {
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
  lane.sliceStart = now();
}

/**
 * A budget of `ms` milliseconds of matching in the lane `lane` (the organization). `now`
 * for tests; the time spent waiting for the lane or between slices is not counted.
 */
export function matchBudget(
  { lane: name, ms = PATTERN_BUDGET_MS, now = () => performance.now() }: {
    lane: string;
    ms?: number;
    now?: () => number;
  },
): MatchBudget {
  let spent = 0;
  return {
    anyMatches: (pattern, values) =>
      inLane(name, now, async (lane) => {
        let last = now();
        for (const value of values) {
          if (spent > ms) return false;
          if (last - lane.sliceStart >= SLICE_MS) {
            await betweenSlices(lane, now);
            last = now();
          }
          const hit = matchesBounded(pattern, value);
          const at = now();
          spent += at - last;
          lane.used += at - last;
          last = at;
          if (hit) return true;
        }
        return false;
      }),
  };
}
