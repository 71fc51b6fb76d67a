/**
 * bench:compare REF — this tree against an earlier commit, so a change that costs speed
 * is seen before it lands. REF is checked out in a temporary git worktree (removed at the
 * end); then, BENCH_COMPARE_ROUNDS times (3), each side runs bench:ingest, bench:deliver
 * and bench:spike, the two sides alternately and the order swapped each round, so load
 * from elsewhere on the machine falls on both. Both sides run this tree's benchmark code
 * (copied over REF's bench/), so they are measured the same way; BENCH_COMPARE_OWN=1 runs
 * REF's own instead (for a REF whose service this tree's benchmarks no longer fit).
 * Prints each figure's median per side and the ratio of this tree's to REF's.
 *
 * Each benchmark runs one round (BENCH_ROUNDS=1) with its own defaults otherwise; set
 * BENCH_SECONDS, BENCH_SUBMISSIONS and the like to shorten them (passed on to both). The
 * bare references (../shared/bench beside this tree, BARE_DURABLE_DIR to point elsewhere)
 * serve both sides. A figure a side does not print shows as "–".
 *
 *     deno task bench:compare 0738927
 */
import { checkOutBeside, median } from "./ref_worktree.ts";

const REF = Deno.args[0];
if (!REF) {
  console.error("usage: deno task bench:compare REF  (a commit, branch or tag)");
  Deno.exit(2);
}
const ROUNDS = Number(Deno.env.get("BENCH_COMPARE_ROUNDS") ?? "3");
/** The bare references' folder as a URL (the benchmarks resolve file names against it). */
const BARE_DIR = new URL(
  Deno.env.get("BARE_DURABLE_DIR") ?? "../../shared/bench/",
  import.meta.url,
).href.replace(/\/?$/, "/");

/** A figure read from a benchmark's output: its name, pattern (first group) and unit. */
interface Figure {
  name: string;
  pattern: RegExp;
  /** Whether more is better (ratios shown as this tree ÷ REF either way). */
  higherIsBetter: boolean;
}

const BENCHMARKS: { task: string; figures: Figure[] }[] = [
  {
    task: "ingest",
    figures: [
      {
        name: "ingest: formrelay req/s",
        pattern: /^formrelay, defaults \(1\)\s+(\d+) req\/s/m,
        higherIsBetter: true,
      },
      {
        name: "ingest: ratio to bare durable",
        pattern: /ratio to the bare durable ingest ([\d.]+)/,
        higherIsBetter: true,
      },
      {
        // The service against its own writes alone: what the rest of its request path costs.
        name: "ingest: ratio to its writes alone",
        pattern: /the service ([\d.]+) of them/,
        higherIsBetter: true,
      },
      {
        // The same, both running at once: the ratio of their CPU a request, without the drift.
        name: "ingest: side by side, CPU share of its writes alone",
        pattern: /by cost: median ([\d.]+)/,
        higherIsBetter: true,
      },
      {
        name: "ingest: CPU µs/request",
        pattern: /^formrelay, defaults \(1\).*?CPU\s+(\d+) µs\/req/m,
        higherIsBetter: false,
      },
    ],
  },
  {
    task: "deliver",
    figures: [
      {
        name: "deliver: steady deliveries/s",
        pattern: /steady-state after acceptance (\d+)\/s/,
        higherIsBetter: true,
      },
      {
        name: "deliver: ratio to bare durable",
        pattern: /ratio to the bare durable delivery ([\d.]+)/,
        higherIsBetter: true,
      },
      {
        name: "deliver: CPU ms/submission",
        pattern: /service CPU ([\d.]+) ms per delivered submission/,
        higherIsBetter: false,
      },
      {
        name: "deliver: idle p50 ms",
        pattern: /idle latency.*?p50 ([\d.]+) ms/,
        higherIsBetter: false,
      },
    ],
  },
  {
    task: "spike",
    figures: [
      { name: "spike: answers/s", pattern: /^answers \d+ \((\d+)\/s\)/m, higherIsBetter: true },
      { name: "spike: 503 %", pattern: /503s ([\d.]+) %/, higherIsBetter: false },
      { name: "spike: accepted p99 ms", pattern: /p99 ([\d.]+) ms, max/, higherIsBetter: false },
      {
        name: "spike: emails/s end to end",
        pattern: /(\d+) emails\/s end to end/,
        higherIsBetter: true,
      },
      {
        name: "spike: CPU ms/email",
        pattern: /service CPU [\d.]+ s .*?: ([\d.]+) ms per delivered submission/,
        higherIsBetter: false,
      },
      {
        name: "spike: CPU ÷ bare durable email",
        pattern: /formrelay's CPU per email ([\d.]+) × it/,
        higherIsBetter: false,
      },
      {
        name: "spike, warm: CPU ms/email",
        pattern: /^warm .*?: formrelay .*?CPU ([\d.]+) ms each/m,
        higherIsBetter: false,
      },
    ],
  },
];

/** Runs one benchmark in `dir`; its output, or null (and the error shown) when it failed. */
async function run(dir: string, task: string): Promise<string | null> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--lock=deno.test.lock", `bench/${task}.ts`],
    cwd: dir,
    env: { BENCH_ROUNDS: "1", BENCH_STEPS: "0", BARE_DURABLE_DIR: BARE_DIR },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stdout);
  if (!output.success) {
    console.error(`  ${task} failed in ${dir}:\n${new TextDecoder().decode(output.stderr)}`);
    return null;
  }
  return text;
}

const worktree = await checkOutBeside(REF, {
  prefix: "formrelay-compare-",
  ownBench: Deno.env.get("BENCH_COMPARE_OWN") === "1",
});
const { sides } = worktree;
/** Values per side and figure. */
const seen = sides.map(() => new Map<string, number[]>());
console.log(
  `bench:compare — ${sides[1].name} against ${sides[0].name}, ${ROUNDS} alternating rounds ` +
    `of ${BENCHMARKS.map((b) => `bench:${b.task}`).join(", ")}; ${navigator.hardwareConcurrency} ` +
    `cores, Deno ${Deno.version.deno}, ${new Date().toISOString()}`,
);
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const { task, figures } of BENCHMARKS) {
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      for (const side of order) {
        const text = await run(sides[side].dir, task);
        const values = figures.map((figure) => {
          const match = text === null ? null : figure.pattern.exec(text);
          if (match === null) return "–";
          const value = Number(match[1]);
          const list = seen[side].get(figure.name) ?? [];
          list.push(value);
          seen[side].set(figure.name, list);
          return String(value);
        });
        console.log(
          `round ${round + 1} ${task.padEnd(8)} ${sides[side].name}: ${values.join("  ")}`,
        );
      }
    }
  }
} finally {
  await worktree.remove().catch((error) => console.error(error));
}

console.log("");
console.log(
  `${"median".padEnd(32)} ${sides[0].name.padStart(18)} ${sides[1].name.padStart(26)}  ratio`,
);
for (const { figures } of BENCHMARKS) {
  for (const figure of figures) {
    const [ref, here] = seen.map((side) => side.get(figure.name));
    const show = (list?: number[]) =>
      list === undefined ? "–" : String(Number(median(list).toPrecision(4)));
    const ratio = ref && here && median(ref) !== 0 ? (median(here) / median(ref)).toFixed(3) : "–";
    console.log(
      `${figure.name.padEnd(32)} ${show(ref).padStart(18)} ${show(here).padStart(26)}  ${ratio}${
        figure.higherIsBetter ? "" : " (lower is better)"
      }`,
    );
  }
}
