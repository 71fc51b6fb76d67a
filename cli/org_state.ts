/**
 * The host disables, enables or deletes an organization. Disabled, its tenant keys are
 * refused and its forms accept nothing, while what it accepted before is still
 * delivered; enabled again, all works as before. Deleted, its forms, destinations, keys
 * and record are gone for good (asked with --yes only).
 * Usage: deno task disable-org|enable-org <orgId>; deno task delete-org <orgId> --yes
 */
import { deleteOrg, getOrg, setOrgDisabled } from "../store/orgs.ts";
import { printable, withService } from "./_open.ts";

const [action, orgId, ...rest] = Deno.args;
const confirmed = rest.length === 1 && rest[0] === "--yes";
const usage = action === "delete"
  ? "Usage: deno task delete-org <orgId> --yes (deletes its forms and keys for good)"
  : `Usage: deno task ${action}-org <orgId>`;
if (
  !["disable", "enable", "delete"].includes(action) || !orgId || orgId.startsWith("-") ||
  (action === "delete" ? !confirmed : rest.length > 0)
) {
  console.error(usage);
  Deno.exit(2);
}
const done = await withService(async ({ db }) => {
  if (action === "delete") {
    const name = (await getOrg(db, orgId))?.name;
    return await deleteOrg(db, orgId) ? `deleted "${printable(name ?? "")}"` : null;
  }
  const org = await setOrgDisabled(db, orgId, action === "disable");
  return org === null
    ? null
    : `${org.disabledAt ? "disabled" : "enabled"} "${printable(org.name)}"`;
});
if (done === null) {
  console.error(`formrelay: no organization "${printable(orgId)}" (deno task orgs lists them)`);
  Deno.exit(1);
}
console.log(`${orgId} ${done}`);
