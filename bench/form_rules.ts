/**
 * The cost of a form's rules at acceptance, in process (no server): the worst shapes a
 * bounded pattern may take on a hostile value, against a refused shape for scale, and
 * every spam rule at once on a 128 KB submission of 1 000 fields. Bounded: a fixed
 * number of runs each, then it stops.
 *
 *     deno task bench:rules
 */
import { compilePattern, matchesBounded } from "../rules/patterns.ts";
import { pageToken, spamRuleCaught } from "../rules/spam.ts";
import { createSealer } from "../store/sealing.ts";

/** Median milliseconds of `runs` calls of `fn`. */
async function median(runs: number, fn: () => unknown): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    await fn();
    times.push(performance.now() - start);
  }
  return times.sort((a, b) => a - b)[Math.floor(runs / 2)];
}

console.log(
  `form rules bench · ${navigator.hardwareConcurrency} cores · Deno ${Deno.version.deno}`,
);

const hostile = "a".repeat(128 * 1024);
const issueShapes = ["(a|a|a|a)".repeat(22) + "!", "\\w{0,10}\\w{0,10}\\w{0,10}\\w*!"];
for (const source of ["a+b", "^.*x$", "a?a?a?[a-z]*!", "\\S+@x", ...issueShapes]) {
  const pattern = compilePattern(source);
  const ms = await median(51, () => matchesBounded(pattern, hostile));
  console.log(`accepted ${source.slice(0, 30).padEnd(30)} on 128 KB of "a": ${ms.toFixed(3)} ms`);
}
// A refused shape, run here directly to show what the bound prevents: each added
// character doubles the time.
for (const n of [18, 20, 22]) {
  const refused = /(a+)+$/;
  const ms = await median(3, () => refused.test("a".repeat(n) + "!"));
  console.log(`refused  (a+)+$ on ${n} "a" and "!": ${ms.toFixed(1)} ms`);
}

const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
const publicKey = "pk_" + "b".repeat(40);
const orgId = "org_bench";
const payload = () => {
  const fields: Record<string, unknown> = {
    email: "ada@example.org",
    _formrelay_loaded: pageToken(sealer, publicKey, Date.now() - 10_000),
  };
  for (let i = 0; i < 1000; i++) fields[`f${i}`] = "word ".repeat(25);
  return fields;
};
const rules = {
  minSeconds: 3,
  maxLinks: 2,
  blockedWords: Array.from({ length: 20 }, (_, i) => `blocked${i}`),
  blockedPatterns: ["\\bcasino\\b", "https?://\\S+\\.ru", "\\bs[e3]o\\b"],
  disposableEmailField: "email",
};
await spamRuleCaught(rules, { payload: payload(), sealer, publicKey, orgId, now: Date.now() }); // loads the list
const submissions = Array.from({ length: 31 }, payload);
let i = 0;
const ms = await median(
  31,
  () =>
    spamRuleCaught(rules, { payload: submissions[i++], sealer, publicKey, orgId, now: Date.now() }),
);
console.log(
  `every spam rule on a 128 KB submission of 1 000 fields (none caught): ${ms.toFixed(2)} ms`,
);

// The worst a tenant's patterns and a visitor's values can do together: 20 patterns of
// the costliest accepted shape found (21 alternations) on 128 values of 1 000 "a": held
// by the budget.
const worstRules = {
  blockedPatterns: Array.from({ length: 20 }, (_, i) => "(a|a|a|a)".repeat(21) + `!${i}#`),
};
const worstPayload = Object.fromEntries(
  Array.from({ length: 128 }, (_, i) => [`f${i}`, "a".repeat(1000)]),
);
const worst = await median(
  11,
  () =>
    spamRuleCaught(worstRules, {
      payload: { ...worstPayload },
      sealer,
      publicKey,
      orgId,
      now: Date.now(),
    }),
);
console.log(
  `20 costliest patterns on 128 values of 1 000 characters (budget 50 ms): ${worst.toFixed(1)} ms`,
);
