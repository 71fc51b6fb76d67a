/**
 * Import cycle check: reads `deno info --json` for every TypeScript file of the
 * repository (so every entry point: main.ts, the CLIs, benches, tools and tests) and
 * fails, printing each cycle, when local modules import each other in a circle
 * (type-only and dynamic imports included). Run with `deno task cycles`.
 *
 * @module
 */

/** Local module graph: module specifier → the local modules it imports. */
export type ModuleGraph = Map<string, Set<string>>;

/** What `deno info --json` prints, as far as this check reads it. */
interface DenoInfo {
  modules: {
    specifier: string;
    dependencies?: { code?: { specifier: string }; type?: { specifier: string } }[];
  }[];
}

/** Adds the local (file:) modules and imports of one `deno info --json` answer to `graph`. */
export function addToGraph(graph: ModuleGraph, info: DenoInfo): void {
  for (const module of info.modules) {
    if (!module.specifier.startsWith("file:")) continue;
    const edges = graph.get(module.specifier) ?? new Set<string>();
    graph.set(module.specifier, edges);
    for (const dependency of module.dependencies ?? []) {
      for (const target of [dependency.code?.specifier, dependency.type?.specifier]) {
        if (target?.startsWith("file:")) edges.add(target);
      }
    }
  }
}

/** Modules that import each other in a circle: all of them, and one circle through them. */
export interface Cycle {
  /** Every module of the strongly connected component, sorted. */
  modules: string[];
  /** One circle through it, starting and ending at the same module. */
  path: string[];
}

/**
 * The import cycles of a graph, one per strongly connected component of more than one
 * module (or a module importing itself). Tarjan's algorithm, iterative so deep graphs
 * cannot overflow the stack.
 */
export function findCycles(graph: ModuleGraph): Cycle[] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const components: string[][] = [];
  let counter = 0;

  for (const root of graph.keys()) {
    if (index.has(root)) continue;
    const work: { node: string; edges: Iterator<string> }[] = [];
    const visit = (node: string) => {
      index.set(node, counter);
      low.set(node, counter);
      counter++;
      stack.push(node);
      onStack.add(node);
      work.push({ node, edges: (graph.get(node) ?? new Set()).values() });
    };
    visit(root);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const next = frame.edges.next();
      if (!next.done) {
        const target = next.value;
        if (!index.has(target)) visit(target);
        else if (onStack.has(target)) {
          low.set(frame.node, Math.min(low.get(frame.node)!, index.get(target)!));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1].node;
        low.set(parent, Math.min(low.get(parent)!, low.get(frame.node)!));
      }
      if (low.get(frame.node) === index.get(frame.node)) {
        const component: string[] = [];
        let member: string;
        do {
          member = stack.pop()!;
          onStack.delete(member);
          component.push(member);
        } while (member !== frame.node);
        const selfImport = graph.get(frame.node)?.has(frame.node) ?? false;
        if (component.length > 1 || selfImport) components.push(component);
      }
    }
  }
  return components.map((component) => ({
    modules: component.sort(),
    path: cyclePath(graph, new Set(component)),
  }));
}

/** One concrete circle through a strongly connected component, found breadth-first. */
function cyclePath(graph: ModuleGraph, component: Set<string>): string[] {
  const start = [...component].sort()[0];
  const cameFrom = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift()!;
    for (const target of graph.get(node) ?? []) {
      if (!component.has(target)) continue;
      if (target === start) {
        const path = [start];
        for (let at = node; at !== start; at = cameFrom.get(at)!) path.unshift(at);
        path.unshift(start);
        return path;
      }
      if (!cameFrom.has(target)) {
        cameFrom.set(target, node);
        queue.push(target);
      }
    }
  }
  return [start, start];
}

const SKIPPED_DIRS = new Set(["node_modules", "data", ".git", "artifacts"]);

/** Every .ts file under `dir`, outside dependency, data and artifact folders. */
export async function tsFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory && !SKIPPED_DIRS.has(entry.name) && !entry.name.startsWith(".")) {
      files.push(...await tsFiles(path));
    } else if (entry.isFile && entry.name.endsWith(".ts")) {
      files.push(path);
    }
  }
  return files;
}

async function denoInfo(file: string): Promise<DenoInfo> {
  const output = await new Deno.Command(Deno.execPath(), {
    // deno.test.lock locks the test packages too; deno.lock must keep the service's alone.
    args: ["info", "--json", "--lock=deno.test.lock", file],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!output.success) {
    throw new Error(`deno info failed for "${file}": ${new TextDecoder().decode(output.stderr)}`);
  }
  return JSON.parse(new TextDecoder().decode(output.stdout));
}

if (import.meta.main) {
  const root = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
  const graph: ModuleGraph = new Map();
  for (const file of await tsFiles(root)) {
    if (graph.has(`file://${file}`)) continue; // already reached from an earlier entry
    addToGraph(graph, await denoInfo(file));
  }
  const cycles = findCycles(graph);
  const short = (specifier: string) => specifier.replace(`file://${root}/`, "");
  if (cycles.length === 0) {
    console.log(`No import cycles among ${graph.size} modules`);
  } else {
    for (const { modules, path } of cycles) {
      console.error(
        `Import cycle among ${modules.length} modules (${modules.map(short).join(", ")}): ` +
          path.map(short).join(" -> "),
      );
    }
    Deno.exit(1);
  }
}
