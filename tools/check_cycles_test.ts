import assert from "node:assert/strict";
import { addToGraph, findCycles, type ModuleGraph } from "./check_cycles.ts";

function graphOf(edges: Record<string, string[]>): ModuleGraph {
  return new Map(Object.entries(edges).map(([from, to]) => [from, new Set(to)]));
}

Deno.test("findCycles finds none in a graph without circles", () => {
  assert.deepEqual(findCycles(graphOf({ a: ["b", "c"], b: ["c"], c: [] })), []);
});

Deno.test("findCycles reports a circle with all its modules and a path through them", () => {
  const cycles = findCycles(graphOf({ a: ["b"], b: ["c"], c: ["a", "d"], d: [] }));
  assert.equal(cycles.length, 1);
  assert.deepEqual(cycles[0].modules, ["a", "b", "c"]);
  assert.deepEqual(cycles[0].path, ["a", "b", "c", "a"]);
});

Deno.test("findCycles reports separate circles and a module importing itself", () => {
  const cycles = findCycles(graphOf({ a: ["b"], b: ["a"], c: ["d"], d: ["c"], e: ["e"] }));
  assert.deepEqual(cycles.map((c) => c.modules).sort(), [["a", "b"], ["c", "d"], ["e"]]);
  assert.deepEqual(cycles.find((c) => c.modules[0] === "e")!.path, ["e", "e"]);
});

Deno.test("findCycles handles a long chain without overflowing the stack", () => {
  const edges: Record<string, string[]> = {};
  for (let i = 0; i < 50_000; i++) edges[`m${i}`] = [`m${i + 1}`];
  edges["m50000"] = ["m0"];
  const cycles = findCycles(graphOf(edges));
  assert.equal(cycles.length, 1);
  assert.equal(cycles[0].modules.length, 50_001);
});

Deno.test("addToGraph keeps local modules and their code and type imports only", () => {
  const graph: ModuleGraph = new Map();
  addToGraph(graph, {
    modules: [
      {
        specifier: "file:///r/a.ts",
        dependencies: [
          { code: { specifier: "file:///r/b.ts" } },
          { type: { specifier: "file:///r/c.ts" } },
          { code: { specifier: "npm:hono@4" } },
        ],
      },
      { specifier: "npm:hono@4" },
    ],
  });
  assert.deepEqual([...graph.keys()], ["file:///r/a.ts"]);
  assert.deepEqual([...graph.get("file:///r/a.ts")!], ["file:///r/b.ts", "file:///r/c.ts"]);
});
