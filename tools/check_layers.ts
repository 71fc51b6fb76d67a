/**
 * Layer check, beside the import cycle check (`deno task cycles` runs both): fails,
 * printing each place, where the house's layout is broken:
 *
 * - only `store/` touches KV: no other source file (tests, benchmarks and tools aside)
 *   opens a KV or calls a KV method (`Deno.openKv`, `.kv.get(…)`, `.atomic()`, …);
 * - `metrics.ts` depends, even through other modules, neither on Hono nor on `routes/`:
 *   the store and the delivery engine count into it without pulling in HTTP;
 * - nor does any module of `ingest/`: ingestion decides in the domain's terms (a
 *   Refusal, ingest/refusal.ts) and routes/ingest.ts alone speaks HTTP.
 *
 * @module
 */
import { tsFiles } from "./check_cycles.ts";

/** Where a source file reaches KV itself. */
const KV_ACCESS =
  /\bDeno\.openKv\b|\.kv\.(get|getMany|set|delete|list|atomic|enqueue|listenQueue|watch|commit)\b|\.atomic\(\)/;

/** Whether a file (relative to the repository root) may touch KV: store/, tests, benchmarks, tools. */
export function mayTouchKv(path: string): boolean {
  return /^(store|tests|bench|tools)\//.test(path) || path.endsWith("_test.ts");
}

/** The lines of a source file that touch KV, as "path:line: text". */
export function kvAccesses(path: string, source: string): string[] {
  if (mayTouchKv(path)) return [];
  return source.split("\n").flatMap((line, i) =>
    KV_ACCESS.test(line) ? [`${path}:${i + 1}: ${line.trim()}`] : []
  );
}

/** What `deno info --json` prints, as far as this check reads it. */
export interface DenoInfo {
  modules: { specifier: string; dependencies?: { specifier: string }[] }[];
}

/** Whether a module (relative to the repository root) must not reach Hono or `routes/`. */
export function mustBeHttpFree(path: string): boolean {
  if (path.endsWith("_test.ts")) return false;
  return path === "metrics.ts" || /^ingest\/.+\.ts$/.test(path);
}

/** The modules and packages an HTTP-free module reaches, as found in its `deno info` graph. */
export function forbiddenHttp(info: DenoInfo): string[] {
  const found = new Set<string>();
  for (const module of info.modules) {
    for (
      const specifier of [
        module.specifier,
        ...(module.dependencies ?? []).map((d) => d.specifier),
      ]
    ) {
      if (/\/routes\/[^/]+\.ts$/.test(specifier) || /^(npm:\/?)?hono(@|\/|$)/.test(specifier)) {
        found.add(specifier);
      }
    }
  }
  return [...found].sort();
}

if (import.meta.main) {
  const root = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
  const problems: string[] = [];
  const httpFree: string[] = [];
  for (const file of await tsFiles(root)) {
    const path = file.slice(root.length + 1);
    for (const access of kvAccesses(path, await Deno.readTextFile(file))) {
      problems.push(`KV touched outside store/: ${access}`);
    }
    if (mustBeHttpFree(path)) httpFree.push(path);
  }
  for (const path of httpFree) {
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", "--lock=deno.test.lock", `${root}/${path}`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!output.success) throw new Error(new TextDecoder().decode(output.stderr));
    const info = JSON.parse(new TextDecoder().decode(output.stdout));
    for (const specifier of forbiddenHttp(info)) {
      problems.push(`${path} depends on ${specifier.replace(`file://${root}/`, "")}`);
    }
  }
  if (problems.length === 0) {
    console.log("Layers kept: KV only in store/, metrics.ts and ingest/ without Hono or routes/");
  } else {
    for (const problem of problems) console.error(problem);
    Deno.exit(1);
  }
}
