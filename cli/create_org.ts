/**
 * Creates an organization and prints `{"orgId","tenantKey"}` once; the key is not stored
 * in plaintext and cannot be shown again. Usage: deno task create-org "<name>"
 */
import { createOrg } from "../store/orgs.ts";
import { withService } from "./_open.ts";

const name = Deno.args.join(" ").trim();
if (name === "" || name.length > 200) {
  console.error('Usage: deno task create-org "<organization name>" (1 to 200 characters)');
  Deno.exit(2);
}
const created = await withService((service) => createOrg(service.db, name));
console.log(JSON.stringify(created));
