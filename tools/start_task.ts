/**
 * How `deno task start` runs main.ts, read from deno.json, the one place it is written:
 * the environment the task sets and the V8 flags it passes. The tests and benchmarks that
 * start main.ts as a child process use these, so they run what users run.
 *
 * @module
 */
import denoJson from "../deno.json" with { type: "json" };

/** The start task's settings. */
export interface StartTask {
  /** Variables the task sets before `deno run` (e.g. MALLOC_TRIM_THRESHOLD_). */
  env: Readonly<Record<string, string>>;
  /** Its `--v8-flags=…` argument, whole. */
  v8Flags: string;
  /** The permissions it grants (`--allow-…`), narrower than the tests' usual `-A`. */
  permissions: readonly string[];
}

/** Parses a task's command: `NAME=value … deno run --v8-flags=… … main.ts`. */
export function parseStartTask(command: string): StartTask {
  const words = command.trim().split(/\s+/);
  const env: Record<string, string> = {};
  let i = 0;
  for (; i < words.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[i]); i++) {
    const at = words[i].indexOf("=");
    env[words[i].slice(0, at)] = words[i].slice(at + 1);
  }
  if (words[i] !== "deno" || words[i + 1] !== "run") {
    throw new Error(`Expected "deno run" after the task's variables: ${command}`);
  }
  const v8Flags = words.find((word) => word.startsWith("--v8-flags="));
  if (v8Flags === undefined) throw new Error(`Expected --v8-flags in the task: ${command}`);
  const permissions = words.filter((word) => word.startsWith("--allow-"));
  return { env, v8Flags, permissions };
}

/** The settings of deno.json's `start` task. */
export const START_TASK: StartTask = parseStartTask(denoJson.tasks.start);
