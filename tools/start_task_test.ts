import assert from "node:assert/strict";
import denoJson from "../deno.json" with { type: "json" };
import { parseStartTask, START_TASK } from "./start_task.ts";

Deno.test("parseStartTask reads a task's variables and V8 flags", () => {
  const task = parseStartTask(
    "A_B_=1 C=x deno run --watch --v8-flags=--max-semi-space-size=8 --allow-net main.ts",
  );
  assert.deepEqual(task, {
    env: { A_B_: "1", C: "x" },
    v8Flags: "--v8-flags=--max-semi-space-size=8",
    permissions: ["--allow-net"],
  });
  assert.throws(() => parseStartTask("deno run main.ts"), /Expected --v8-flags/);
  assert.throws(() => parseStartTask("A=1 deno test"), /Expected "deno run"/);
});

Deno.test("the start task sets the allocator's trim threshold and V8's heap settings", () => {
  assert.equal(START_TASK.env.MALLOC_TRIM_THRESHOLD_, "131072");
  assert.equal(START_TASK.env.MALLOC_MMAP_THRESHOLD_, "65536");
  assert.match(START_TASK.v8Flags, /--gc-memory-reducer-start-delay-ms=5000/);
  assert.match(START_TASK.v8Flags, /--heap-growing-percent=100/);
  assert.match(START_TASK.v8Flags, /--max-semi-space-size=8/);
  // On two cores V8's GC helper threads cost more CPU than they save (docs/design.md).
  assert.match(START_TASK.v8Flags, /--single-threaded-gc/);
  // Explicit permissions, not -A (STYLE); tests run children with them (permissions: "start").
  assert.deepEqual(START_TASK.permissions, [
    "--allow-net",
    "--allow-env",
    "--allow-read",
    "--allow-write",
  ]);
});

Deno.test("the dev task runs main.ts with the start task's environment and V8 flags", () => {
  const dev = parseStartTask(denoJson.tasks.dev);
  assert.equal(dev.v8Flags, START_TASK.v8Flags);
  for (const [name, value] of Object.entries(START_TASK.env)) assert.equal(dev.env[name], value);
});
