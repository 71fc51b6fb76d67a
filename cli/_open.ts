/**
 * What the operator CLIs share: the service opened from the environment's config, with
 * logs silenced and no delivery, a failure printed as `formrelay: <reason>` with exit
 * code 1, and tenant-supplied text made safe to print.
 *
 * @module
 */
import { type Config, ConfigError, loadConfig } from "../config.ts";
import { type Service, startService } from "../service.ts";

/**
 * Runs `task` against a service opened for the CLI and closes it afterwards; a failure
 * (a ConfigError among them) is printed to stderr and ends the process with code 1.
 */
export async function withService<T>(
  task: (service: Service, config: Config) => Promise<T>,
): Promise<T> {
  try {
    const config = { ...loadConfig(Deno.env.toObject()), logLevel: "silent" as const };
    const service = await startService(config, { deliver: false });
    try {
      return await task(service, config);
    } finally {
      await service.close();
    }
  } catch (error) {
    console.error(`formrelay: ${error instanceof ConfigError ? error.message : error}`);
    Deno.exit(1);
  }
}

/** Tenant-supplied text made safe for a terminal: control characters escaped. */
export function printable(value: string): string {
  // deno-lint-ignore no-control-regex
  return value.replace(/[\u0000-\u001f\u007f-\u009f]/g, (ch) => JSON.stringify(ch).slice(1, -1));
}
