/**
 * Lists an organization's forms and their destinations for an operator: settings and
 * where each destination delivers, never its secrets (passwords, headers, auth headers,
 * signing secrets, or a URL's userinfo, path and query: URLs show as scheme://host[:port]).
 * Usage: deno task forms <orgId> [--json]
 */
import { describeTarget, type DestinationTarget } from "../connectors/registry.ts";
import type { Db } from "../store/db.ts";
import { type DestinationHealth, listDestinations } from "../store/destinations.ts";
import { listForms } from "../store/forms.ts";
import { getOrg } from "../store/orgs.ts";
import { printable, withService } from "./_open.ts";

interface FormListing {
  org: { id: string; name: string };
  forms: {
    id: string;
    name: string;
    publicKey: string;
    enabled: boolean;
    allowedOrigins: string[];
    verifyCaptcha: boolean;
    honeypotField: string | null;
    redirectUrl: string | null;
    createdAt: string;
    destinations: {
      id: string;
      type: string;
      isEnabled: boolean;
      health: DestinationHealth;
      target: DestinationTarget | null;
    }[];
  }[];
}

const USAGE = "Usage: deno task forms <orgId> [--json]";

/** The organization's forms with their destinations, or null when there is no such org. */
async function listing(db: Db, orgId: string): Promise<FormListing | null> {
  const org = await getOrg(db, orgId);
  if (org === null) return null;
  const forms = await listForms(db, orgId);
  return {
    org: { id: org.id, name: org.name },
    forms: await Promise.all(forms.map(async (form) => ({
      id: form.id,
      name: form.name,
      publicKey: form.publicKey,
      enabled: form.enabled,
      allowedOrigins: form.allowedOrigins,
      verifyCaptcha: form.verifyCaptcha,
      honeypotField: form.honeypotField ?? null,
      redirectUrl: form.redirectUrl ?? null,
      createdAt: form.createdAt,
      destinations: (await listDestinations(db, form.id)).map((destination) => ({
        id: destination.id,
        type: destination.type,
        isEnabled: destination.isEnabled,
        health: destination.health,
        target: describeTarget(destination.type, destination.config),
      })),
    }))),
  };
}

function targetText(target: DestinationTarget | null): string {
  if (target === null) return "(unreadable config)";
  if ("url" in target) return `${target.method} ${target.url}`;
  const relay = target.relay === "platform"
    ? "platform relay"
    : `${target.relay} (${target.secureTransport})`;
  return `${relay} -> ${target.to.join(", ")}`;
}

/** The listing as text for a person. */
function formatText({ org, forms }: FormListing): string {
  const lines = [
    `Organization "${printable(org.name)}" (${org.id}): ${forms.length} form${
      forms.length === 1 ? "" : "s"
    }`,
  ];
  const row = (label: string, value: string) => `  ${label.padEnd(17)}${printable(value)}`;
  for (const form of forms) {
    lines.push(
      "",
      `Form "${printable(form.name)}" (${form.id})`,
      row("public key", form.publicKey),
      row("enabled", form.enabled ? "yes" : "no"),
      row(
        "allowed origins",
        form.allowedOrigins.length === 0 ? "any (none listed)" : form.allowedOrigins.join(", "),
      ),
      row("captcha", form.verifyCaptcha ? "on" : "off"),
      row("honeypot field", form.honeypotField ?? "(none)"),
      row("redirect URL", form.redirectUrl ?? "(none)"),
      row("created", form.createdAt),
      row("destinations", String(form.destinations.length)),
    );
    for (const destination of form.destinations) {
      const { health } = destination;
      const state = !destination.isEnabled
        ? "disabled"
        : health.state === "paused"
        ? `paused since ${health.since}: ${health.reason}`
        : "enabled";
      lines.push(
        `    - ${destination.type} ${destination.id} ${printable(state)}`,
        `      ${printable(targetText(destination.target))}`,
      );
    }
  }
  return lines.join("\n");
}

const json = Deno.args.includes("--json");
const positional = Deno.args.filter((arg) => arg !== "--json");
if (positional.length !== 1 || positional[0].startsWith("-")) {
  console.error(USAGE);
  Deno.exit(2);
}
const orgId = positional[0];
const result = await withService((service) => listing(service.db, orgId));
if (result === null) {
  console.error(`formrelay: no organization "${printable(orgId)}"`);
  Deno.exit(1);
}
console.log(json ? JSON.stringify(result, null, 2) : formatText(result));
