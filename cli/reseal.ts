/**
 * Rewrites every sealed value still under an earlier sealing key with the current one
 * (SUBMISSION_ENCRYPTION_KEY), then counts what each key still seals and says which
 * earlier keys (SUBMISSION_ENCRYPTION_KEYS_PREVIOUS) are no longer needed. Safe while
 * the service runs (store/reseal.ts); run it once every process seals with the current key.
 * Usage: deno task reseal [--check] [--key-ids] [--json]
 *   --check    count only, rewrite nothing
 *   --key-ids  print the ids of the configured keys and stop
 */
import { envelopeTtlMs } from "../store/envelope.ts";
import { resealAll, type ResealReport, SEALED_FAMILIES } from "../store/reseal.ts";
import { withService } from "./_open.ts";

const FLAGS = ["--check", "--key-ids", "--json"];
if (Deno.args.some((arg) => !FLAGS.includes(arg))) {
  console.error("Usage: deno task reseal [--check] [--key-ids] [--json]");
  Deno.exit(2);
}
const check = Deno.args.includes("--check");
const json = Deno.args.includes("--json");

const result = await withService(async (service, config) => {
  const keyIds = service.db.sealer.keyIds;
  if (Deno.args.includes("--key-ids")) return { keyIds, first: null, after: null };
  const envelopeLifetimeMs = envelopeTtlMs(config.retryScheduleMs, config.leaseMs) +
    config.failedRetentionMs;
  const first = await resealAll(service.db, { reseal: !check, envelopeLifetimeMs });
  // Counted again: a value changed meanwhile was sealed by whichever process wrote it.
  const after = check ? first : await resealAll(service.db, { reseal: false, envelopeLifetimeMs });
  return { keyIds, first, after };
});

const [current, ...earlier] = result.keyIds;
const { first, after } = result;
if (first === null || after === null) {
  if (json) console.log(JSON.stringify({ current, earlier }));
  else {
    console.log(`current ${current}`);
    for (const id of earlier) console.log(`earlier ${id}`);
  }
  Deno.exit(0);
}
const remaining = (id: string) => after.byKey[id] ?? 0;
if (json) {
  console.log(JSON.stringify({
    current,
    resealed: first.resealed,
    skipped: first.skipped,
    values: Object.fromEntries(result.keyIds.map((id) => [id, remaining(id)])),
    unknown: after.unknown,
    damaged: after.damaged,
    noLongerNeeded: earlier.filter((id) => remaining(id) === 0),
  }));
} else {
  if (!check) {
    const parts = SEALED_FAMILIES.map((family) => `${first.resealed[family]} ${family}`);
    console.log(`Resealed under ${current}: ${parts.join(", ")}.`);
    if (first.skipped > 0) {
      console.log(`${first.skipped} value(s) changed meanwhile were left as written.`);
    }
  }
  console.log(`Key ${current} (current) seals ${remaining(current)} value(s).`);
  for (const id of earlier) {
    console.log(
      remaining(id) === 0
        ? `Key ${id} no longer needed: no value is sealed under it.`
        : `Key ${id} still seals ${remaining(id)} value(s): keep it${
          check ? "; deno task reseal rewrites them" : " and run deno task reseal again"
        }.`,
    );
  }
  printUnknown(after);
}

function printUnknown(report: ResealReport) {
  for (const [id, count] of Object.entries(report.unknown)) {
    console.log(
      `${count} value(s) under key ${id}, which is not configured: give it back in ` +
        "SUBMISSION_ENCRYPTION_KEYS_PREVIOUS or they cannot be opened.",
    );
  }
  if (report.damaged > 0) console.log(`${report.damaged} value(s) do not open (damaged).`);
}
