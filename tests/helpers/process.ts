/** formrelay's main.ts run as a child process, for kill-and-restart tests. */
export interface ServiceProcess {
  origin: string;
  child: Deno.ChildProcess;
  /** stdout lines so far (JSON log lines). */
  lines: string[];
  kill(signal?: Deno.Signal): Promise<void>;
}

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

/** Starts main.ts with the given environment on a free port; resolves once it listens. */
export async function startServiceProcess(env: Record<string, string>): Promise<ServiceProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN],
    env: { PORT: "0", LOG_LEVEL: "info", ALLOW_PRIVATE_DESTINATIONS: "true", ...env },
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines: string[] = [];
  const listening = Promise.withResolvers<string>();
  (async () => {
    let buffer = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      buffer += chunk;
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        lines.push(line);
        if (line.includes('"msg":"listening"')) listening.resolve(JSON.parse(line).url);
      }
    }
    listening.reject(new Error(`main.ts exited before listening:\n${lines.join("\n")}`));
  })();
  const origin = await listening.promise;
  return {
    origin,
    child,
    lines,
    async kill(signal: Deno.Signal = "SIGKILL") {
      try {
        child.kill(signal);
      } catch { /* already gone */ }
      await child.status;
    },
  };
}
