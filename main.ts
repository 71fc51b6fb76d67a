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

const starting = startService(config);
if (Deno.env.get("DENO_DEPLOYMENT_ID")) {
  // Deno Deploy has no KV queues: its cron wakes due jobs there. Crons must be
  // registered when the module loads, before anything is awaited.
  Deno.cron("formrelay delivery sweep", "* * * * *", async () => {
    await (await starting).engine?.sweep();
  });
}
const service = await starting;

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
