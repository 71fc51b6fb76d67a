/**
 * Starting and stopping main.ts: it starts with the start task's own permissions without
 * a warning, and a second stop signal during shutdown (a second Ctrl-C, or `deno task
 * dev`'s watcher passing one on) waits for the shutdown under way instead of crashing it.
 */
import assert from "node:assert/strict";
import { startServiceProcess } from "./helpers/process.ts";

Deno.test("a second stop signal during shutdown is waited out: main.ts exits 0 without an error", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-shutdown-" });
  try {
    const service = await startServiceProcess({ KV_PATH: `${dir}/formrelay.kv` }, {
      stderr: "piped",
    });
    service.child.kill("SIGTERM");
    service.child.kill("SIGINT");
    service.child.kill("SIGTERM");
    const { code } = await service.child.status;
    await service.kill();
    const output = [...service.lines, ...service.stderrLines].join("\n");
    assert.equal(code, 0, output);
    assert.doesNotMatch(output, /BadResource|Uncaught/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("main.ts with the start task's permissions starts without a warning, noting the descriptor limit it assumed", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-start-" });
  try {
    const service = await startServiceProcess({ KV_PATH: `${dir}/formrelay.kv` }, {
      stderr: "piped",
      permissions: "start",
    });
    await service.kill("SIGTERM");
    const entries = service.lines.map((line) => JSON.parse(line));
    const warnings = entries.filter((entry) => entry.level === "warn" || entry.level === "error");
    assert.deepEqual(warnings, []);
    const note = entries.find((entry) => /descriptor limit not readable/.test(entry.msg));
    assert.equal(note?.level, "info");
    assert.equal(note?.maxConnections, 3072);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
