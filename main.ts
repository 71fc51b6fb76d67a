import { type Config, ConfigError, loadConfig } from "./config.ts";
import {
  ASSUMED_DESCRIPTOR_LIMIT,
  canGuardConnections,
  descriptorLimit,
  maxConnectionsFor,
  serveGuarded,
} from "./listener.ts";
import { observeServer } from "./metrics.ts";
import { startService } from "./service.ts";

let config: Config;
try {
  config = loadConfig(Deno.env.toObject());
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  console.error(`formrelay: ${error.message}`);
  Deno.exit(1);
}

const onDeploy = Deno.env.get("DENO_DEPLOYMENT_ID") !== undefined;
const starting = startService(config);
if (onDeploy) {
  // Deno Deploy has no KV queues: its cron wakes due jobs there. Crons must be
  // registered when the module loads, before anything is awaited.
  Deno.cron("formrelay delivery sweep", "* * * * *", async () => {
    await (await starting).engine?.sweep();
  });
}
const service = await starting;
const { logger } = service;

function listening(hostname: string, port: number, limits: Record<string, unknown>) {
  logger.info("listening", {
    url: `http://${hostname === "0.0.0.0" ? "localhost" : hostname}:${port}`,
    kv: config.kvPath ?? "platform default",
    ...limits,
  });
}

let shutdown: () => Promise<void>;
if (onDeploy || !canGuardConnections()) {
  // On Deno Deploy the platform's edge holds client connections; elsewhere this is a
  // Deno without the per-connection server, so the listener's limits cannot apply.
  if (!onDeploy) logger.warn("connection limits unavailable in this Deno: serving without them");
  const server = Deno.serve({
    port: config.port,
    onListen: ({ hostname, port }) => listening(hostname, port, {}),
  }, service.app.fetch);
  shutdown = () => server.shutdown();
} else {
  const descriptors = config.http.maxConnections === null ? descriptorLimit() : null;
  if (config.http.maxConnections === null && descriptors === null) {
    const assumed = maxConnectionsFor(ASSUMED_DESCRIPTOR_LIMIT);
    // Said at info level: this is how `deno task start` runs, and the listener lowers its
    // bound by itself should descriptors run out (listener.ts).
    logger.info(
      `descriptor limit not readable (it needs --allow-all): at most ${assumed} connections, ` +
        "as for 4 096 descriptors, Linux's default hard limit, to which Deno raises its own " +
        "(and a fifth of them for deliveries in flight); if `ulimit -Hn` is another, set " +
        "HTTP_MAX_CONNECTIONS to three quarters of it and DELIVERY_CONCURRENCY to a fifth",
      { maxConnections: assumed },
    );
  }
  const limits = {
    headersTimeoutMs: config.http.headersTimeoutMs,
    keepAliveTimeoutMs: config.http.keepAliveTimeoutMs,
    maxConnections: config.http.maxConnections ??
      maxConnectionsFor(descriptors ?? ASSUMED_DESCRIPTOR_LIMIT),
  };
  const server = serveGuarded({ port: config.port, limits, logger }, service.app.fetch);
  observeServer(server);
  listening(server.addr.hostname, server.addr.port, { maxConnections: limits.maxConnections });
  shutdown = () => server.shutdown();
}

/**
 * Set by `deno task dev`: this runs under `deno run --watch`, where Deno.exit() ends only
 * this run and the watcher goes on waiting for a file change. A stop signal must end the
 * watcher too, so it is raised again once the service has shut down.
 */
const underWatcher = Deno.args.includes("--dev-watch");

/** The shutdown under way: a second stop signal (a second Ctrl-C) waits for the first. */
let stopping: Promise<void> | null = null;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  const stop = () => {
    if (stopping !== null) {
      logger.info("stopping already: waiting for requests under way to finish", { signal });
      return;
    }
    stopping = (async () => {
      await shutdown();
      await service.close();
      if (!underWatcher) Deno.exit(0);
      // Without a listener the signal's default action ends the whole process.
      Deno.removeSignalListener(signal, stop);
      Deno.kill(Deno.pid, signal);
    })();
  };
  Deno.addSignalListener(signal, stop);
}
