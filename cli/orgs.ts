/**
 * Lists the organizations of this deployment for the host: id, name, creation time and
 * how many active tenant keys each has (never a key), and when it was disabled if it is.
 * Usage: deno task orgs [--json]
 */
import { listOrgs } from "../store/orgs.ts";
import { printable, withService } from "./_open.ts";

const json = Deno.args.includes("--json");
if (Deno.args.some((arg) => arg !== "--json")) {
  console.error("Usage: deno task orgs [--json]");
  Deno.exit(2);
}
const orgs = await withService((service) => listOrgs(service.db));
if (json) {
  console.log(JSON.stringify(orgs.map(({ id, name, createdAt, activeKeys, disabledAt }) => ({
    orgId: id,
    name,
    createdAt,
    activeKeys,
    disabledAt: disabledAt ?? null,
  }))));
} else if (orgs.length === 0) {
  console.log('No organizations yet: deno task create-org "<name>" makes one.');
} else {
  for (const org of orgs) {
    const keys = `${org.activeKeys} active key${org.activeKeys === 1 ? "" : "s"}`;
    const disabled = org.disabledAt ? `, disabled ${org.disabledAt}` : "";
    console.log(
      `${org.id}  ${printable(org.name)}  (created ${org.createdAt}, ${keys}${disabled})`,
    );
  }
}
