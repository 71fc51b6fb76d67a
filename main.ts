import { ConfigError, loadConfig } from "./config.ts";
import { startService } from "./service.ts";

let config;
try {
  config = loadConfig(Deno.env.toObject());
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  console.error(`formrelay: ${error.message}`);
  Deno.exit(1);
}

const service = await startService(config);
if (Deno.env.get("DENO_DEPLOYMENT_ID") && service.engine) {
  // Deno Deploy has no KV queues: the cron sweep is what wakes due jobs there.
  const engine = service.engine;
  Deno.cron("formrelay delivery sweep", "* * * * *", async () => {
    await engine.sweep();
  });
}

const server = Deno.serve({
  port: config.port,
  onListen: ({ hostname, port }) =>
    service.logger.info("listening", {
      url: `http://${hostname === "0.0.0.0" ? "localhost" : hostname}:${port}`,
      kv: config.kvPath ?? "platform default",
    }),
}, service.app.fetch);

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, async () => {
    await server.shutdown();
    await service.close();
    Deno.exit(0);
  });
}
