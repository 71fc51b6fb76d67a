import { type Config, ConfigError, loadConfig } from "./config.ts";
import {
  ASSUMED_DESCRIPTOR_LIMIT,
  canGuardConnections,
  type ConnectionInfo,
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

/** Requests being answered now: a stop says how many it waits for. */
let underWay = 0;
async function handle(request: Request, info: Deno.ServeHandlerInfo | ConnectionInfo) {
  underWay++;
  try {
    return await service.app.fetch(request, info);
  } finally {
    underWay--;
  }
}

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
  }, handle);
  shutdown = () => server.shutdown();
} else {
  const descriptors = config.http.maxConnections === null ? descriptorLimit() : null;
  if (config.http.maxConnections === null && descriptors === null) {
    // Nothing for the host to act on: this is how `deno task start` runs (the limit needs
    // --allow-all to be read), Linux's default hard limit is assumed, and the listener
    // lowers its bound by itself should descriptors run out (listener.ts). The bound is
    // in the "listening" line; docs/operations.md says when to set HTTP_MAX_CONNECTIONS.
    logger.debug("descriptor limit not readable: assumed 4096", {
      maxConnections: maxConnectionsFor(ASSUMED_DESCRIPTOR_LIMIT),
    });
  }
  const limits = {
    headersTimeoutMs: config.http.headersTimeoutMs,
    keepAliveTimeoutMs: config.http.keepAliveTimeoutMs,
    maxConnections: config.http.maxConnections ??
      maxConnectionsFor(descriptors ?? ASSUMED_DESCRIPTOR_LIMIT),
  };
  const server = serveGuarded({ port: config.port, limits, logger }, handle);
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

/**
 * A second signal this soon after the first is the same stop: under `deno task start` a
 * Ctrl-C reaches both the task runner, which passes it on, and the service.
 */
const SAME_STOP_MS = 1_000;

/** The shutdown under way: a second stop signal (a second Ctrl-C) waits for the first. */
let stopping: Promise<void> | null = null;
let stopSignalAt = 0;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  const stop = () => {
    if (stopping !== null) {
      if (performance.now() - stopSignalAt < SAME_STOP_MS) {
        logger.debug("stop signal passed on again", { signal });
      } else {
        logger.info(`stopping already: still waiting for ${requests(underWay)}`, { signal });
      }
      return;
    }
    stopSignalAt = performance.now();
    logger.info(
      `stopping: waiting for ${requests(underWay)} under way, then for deliveries in ` +
        "flight; a job cut short is handed back and sent again after the restart",
      { signal },
    );
    stopping = (async () => {
      await shutdown();
      await service.close();
      logger.info("stopped", { signal });
      if (!underWatcher) Deno.exit(0);
      // Without a listener the signal's default action ends the whole process.
      Deno.removeSignalListener(signal, stop);
      Deno.kill(Deno.pid, signal);
    })();
  };
  Deno.addSignalListener(signal, stop);
}

function requests(n: number): string {
  return n === 1 ? "1 request" : `${n} requests`;
}
