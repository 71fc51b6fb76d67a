/**
 * Creates an organization and prints `{"orgId","tenantKey"}` once; the key is not stored
 * in plaintext and cannot be shown again. Usage: deno task create-org "<name>"
 */
import { ConfigError, loadConfig } from "../config.ts";
import { createOrg } from "../store/orgs.ts";
import { startService } from "../service.ts";

const name = Deno.args.join(" ").trim();
if (name === "" || name.length > 200) {
  console.error('Usage: deno task create-org "<organization name>" (1 to 200 characters)');
  Deno.exit(2);
}
try {
  const config = { ...loadConfig(Deno.env.toObject()), logLevel: "silent" as const };
  const service = await startService(config, { deliver: false });
  console.log(JSON.stringify(await createOrg(service.db, name)));
  await service.close();
} catch (error) {
  console.error(`formrelay: ${error instanceof ConfigError ? error.message : error}`);
  Deno.exit(1);
}
