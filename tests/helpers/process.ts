import { START_TASK } from "../../tools/start_task.ts";

/** formrelay's main.ts run as a child process, for kill-and-restart tests. */
export interface ServiceProcess {
  origin: string;
  child: Deno.ChildProcess;
  /** stdout lines so far (JSON log lines). */
  lines: string[];
  /** stderr lines so far, when started with `stderr: "piped"` (else always empty). */
  stderrLines: string[];
  /** Sends the signal, then waits for the exit and the last output line. */
  kill(signal?: Deno.Signal): Promise<void>;
}

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

/** Calls `onLine` for every line of a byte stream; settles at its end. */
async function readLines(stream: ReadableStream<Uint8Array>, onLine: (line: string) => void) {
  let buffer = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      onLine(buffer.slice(0, newline));
      buffer = buffer.slice(newline + 1);
    }
  }
  if (buffer !== "") onLine(buffer);
}

/**
 * Starts main.ts as `deno task start` does (its environment and V8 flags, read from
 * deno.json: tools/start_task.ts), with the given
 * environment, on a free port; resolves once it listens.
 * With `stderr: "piped"` the child's stderr is kept in `stderrLines` instead of shown.
 * `fileDescriptorLimit` runs it under prlimit (soft and hard); `permissions: "start"`
 * with the start task's permissions instead of `-A`.
 */
export async function startServiceProcess(
  env: Record<string, string>,
  options: {
    stderr?: "inherit" | "piped";
    fileDescriptorLimit?: number;
    /** "start": the start task's own permissions (START_TASK.permissions) instead of `-A`. */
    permissions?: "all" | "start";
  } = {},
): Promise<ServiceProcess> {
  const permissions = options.permissions === "start" ? START_TASK.permissions : ["-A"];
  const deno = ["run", ...permissions, START_TASK.v8Flags, MAIN];
  // prlimit sets the soft and hard limit, as `ulimit -n` does (Deno raises soft to hard).
  const limit = options.fileDescriptorLimit;
  const child = new Deno.Command(limit ? "prlimit" : Deno.execPath(), {
    args: limit ? [`--nofile=${limit}:${limit}`, Deno.execPath(), ...deno] : deno,
    env: {
      ...START_TASK.env,
      PORT: "0",
      LOG_LEVEL: "info",
      ALLOW_PRIVATE_DESTINATIONS: "true",
      ...env,
    },
    stdout: "piped",
    stderr: options.stderr ?? "inherit",
  }).spawn();
  const lines: string[] = [];
  const stderrLines: string[] = [];
  const listening = Promise.withResolvers<string>();
  const stderrDone = options.stderr === "piped"
    ? readLines(child.stderr, (line) => stderrLines.push(line))
    : Promise.resolve();
  const stdoutDone = readLines(child.stdout, (line) => {
    lines.push(line);
    if (line.includes('"msg":"listening"')) listening.resolve(JSON.parse(line).url);
  }).finally(() => {
    listening.reject(
      new Error(`main.ts exited before listening:\n${[...lines, ...stderrLines].join("\n")}`),
    );
  });
  // A child that never says it listens (a crash loop, a log level above info) fails the test.
  const noListen = setTimeout(() => {
    listening.reject(new Error(`main.ts did not log "listening" within 30 s`));
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
  }, 30_000);
  const origin = await listening.promise.finally(() => clearTimeout(noListen));
  return {
    origin,
    child,
    lines,
    stderrLines,
    async kill(signal: Deno.Signal = "SIGKILL") {
      try {
        child.kill(signal);
      } catch { /* already gone */ }
      await child.status;
      // Every line the child wrote, so that logs can be scanned after it ends.
      await Promise.all([stdoutDone, stderrDone]);
    },
  };
}

/** The deliveries a service process logged as delivered, as webhook-ids (`<submissionId>.<destinationId>`). */
export function deliveredBy(process: ServiceProcess): Set<string> {
  const done = new Set<string>();
  for (const line of process.lines) {
    if (!line.includes('"msg":"delivery attempt"')) continue;
    const entry = JSON.parse(line);
    if (entry.result === "delivered") done.add(`${entry.submissionId}.${entry.destinationId}`);
  }
  return done;
}
