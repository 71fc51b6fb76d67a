/**
 * Stopping main.ts: a second stop signal during shutdown (a second Ctrl-C, or `deno task
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
