/**
 * Starting and stopping main.ts: it starts with the start task's own permissions saying
 * nothing a host must act on, the first stop signal is logged with what happens next, a
 * second one (a second Ctrl-C, or `deno task start`'s runner passing the same Ctrl-C on)
 * neither crashes the shutdown under way nor goes unsaid, and the last line says the
 * service stopped.
 */
import assert from "node:assert/strict";
import { startServiceProcess } from "./helpers/process.ts";

/** The JSON log lines of a process. */
const entries = (lines: string[]) => lines.map((line) => JSON.parse(line));

Deno.test("stop signals: the first is logged with what happens next, the ones passed on after it are waited out and logged, the last line is 'stopped'", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-shutdown-" });
  try {
    const service = await startServiceProcess({
      KV_PATH: `${dir}/formrelay.kv`,
      LOG_LEVEL: "debug",
    }, { stderr: "piped" });
    // As `deno task start` and a terminal deliver one Ctrl-C: to the runner, which passes
    // it on, and to the service; then a SIGTERM from a supervisor.
    service.child.kill("SIGINT");
    service.child.kill("SIGINT");
    service.child.kill("SIGTERM");
    const { code } = await service.child.status;
    await service.kill();
    const output = [...service.lines, ...service.stderrLines].join("\n");
    assert.equal(code, 0, output);
    assert.doesNotMatch(output, /BadResource|Uncaught/);
    const logged = entries(service.lines);
    const stopping = logged.filter((entry) => /^stopping: /.test(entry.msg));
    assert.equal(stopping.length, 1, output);
    assert.equal(stopping[0].level, "info");
    assert.match(
      stopping[0].msg,
      /^stopping: waiting for \d+ requests? under way, then for deliveries/,
    );
    // Each later signal is said (at debug: it is the same stop). Two SIGINTs sent at once
    // may reach the process as one (the kernel merges a pending signal), and the runtime
    // may take SIGTERM's first: both kinds are heard, one stop, the others said.
    const again = logged.filter((entry) => entry.msg === "stop signal passed on again");
    assert.ok(again.length >= 1 && again.length <= 2, output);
    const heard = new Set([stopping[0], ...again].map((entry) => entry.signal));
    assert.deepEqual([...heard].sort(), ["SIGINT", "SIGTERM"]);
    assert.equal(logged.filter((entry) => /^stopping already/.test(entry.msg)).length, 0);
    const last = logged.at(-1);
    assert.equal(last.msg, "stopped", output);
    assert.equal(last.level, "info");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("main.ts with the start task's permissions starts saying only that it listens: nothing for the host to act on", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-start-" });
  try {
    const service = await startServiceProcess({ KV_PATH: `${dir}/formrelay.kv` }, {
      stderr: "piped",
      permissions: "start",
    });
    const started = entries(service.lines);
    await service.kill("SIGTERM");
    assert.deepEqual(started.map((entry) => entry.msg), ["listening"]);
    assert.equal(started[0].maxConnections, 3072, "the bound assumed, in the listening line");
    const logged = entries(service.lines);
    assert.deepEqual(logged.filter((e) => e.level === "warn" || e.level === "error"), []);
    assert.equal(logged.at(-1).msg, "stopped");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
