/**
 * Issues a new tenant key for an organization whose key is lost: every active key of it
 * is revoked, and the new one is printed once as `{"orgId","tenantKey"}` (stored only as
 * its hash). Its forms and public keys stay as they are. Usage: deno task issue-key <orgId>
 */
import { issueTenantKey } from "../store/orgs.ts";
import { printable, withService } from "./_open.ts";

if (Deno.args.length !== 1 || Deno.args[0].startsWith("-")) {
  console.error("Usage: deno task issue-key <orgId> (deno task orgs lists them)");
  Deno.exit(2);
}
const orgId = Deno.args[0];
const tenantKey = await withService((service) => issueTenantKey(service.db, orgId));
if (tenantKey === null) {
  console.error(`formrelay: no organization "${printable(orgId)}" (deno task orgs lists them)`);
  Deno.exit(1);
}
console.log(JSON.stringify({ orgId, tenantKey }));
