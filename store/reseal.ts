/**
 * Resealing: rewrites every sealed value still under an earlier key of the ring with the
 * current key, and counts what each key still seals. The sealed families: destination
 * configs (`destinations`), forms' captcha secrets (`forms`), notification settings
 * (`notify_settings`) and submission envelopes (`envelopes`: waiting, held and retained
 * submissions alike). Safe while the service runs: each value is rewritten in an atomic
 * commit that checks it is still the one read (an envelope's chunks all together), so a
 * value changed or deleted meanwhile is left as it now is and counted as skipped.
 *
 * @module
 */
import { concatBytes } from "../bytes.ts";
import type { Db } from "./db.ts";
import { splitChunksInto } from "./envelope.ts";
import {
  destinationsPrefix,
  envelopeChunkKey,
  envelopesPrefix,
  formsPrefix,
  notifySettingsKey,
  notifySettingsPrefix,
} from "./keys.ts";
import { retryWhileBusy } from "./kv_busy.ts";
import { UnknownSealingKeyError } from "./sealing.ts";

/** The families of sealed values. */
export const SEALED_FAMILIES = ["destinations", "forms", "notify_settings", "envelopes"] as const;
/** One of SEALED_FAMILIES. */
export type SealedFamily = typeof SEALED_FAMILIES[number];

/** What a pass found: values per key id and family, rewritten, skipped, unknown. */
export interface ResealReport {
  /** Values rewritten under the current key, per family. */
  resealed: Record<SealedFamily, number>;
  /** Values changed or deleted while being resealed (left as they now are). */
  skipped: number;
  /** Values per key id that sealed them (after the rewrite when resealing). */
  byKey: Record<string, number>;
  /** Values no key of the ring opens, per key id they name ("no id": the layout without). */
  unknown: Record<string, number>;
  /** Values under a key of the ring that do not open (damaged, or an envelope partly expired). */
  damaged: number;
}

/** One sealed value as found: how to read its sealed bytes and write new ones. */
interface Found {
  family: SealedFamily;
  context: string;
  sealed: Uint8Array<ArrayBuffer>;
  /** The commit replacing it with `resealed`, checking it is unchanged. */
  replace(resealed: Uint8Array<ArrayBuffer>): Deno.AtomicOperation;
}

/**
 * Goes through every sealed value; with `reseal`, rewrites those not under the current
 * key. `envelopeLifetimeMs` is how long an envelope lives from acceptance (its TTL when
 * written, FAILED_RETENTION_HOURS included): a rewritten one keeps its expiry.
 */
export async function resealAll(
  db: Db,
  options: { reseal: boolean; envelopeLifetimeMs: number; now?: () => number },
): Promise<ResealReport> {
  const now = options.now ?? Date.now;
  const report: ResealReport = {
    resealed: { destinations: 0, forms: 0, notify_settings: 0, envelopes: 0 },
    skipped: 0,
    byKey: {},
    unknown: {},
    damaged: 0,
  };
  const count = (record: Record<string, number>, key: string) => {
    record[key] = (record[key] ?? 0) + 1;
  };

  async function visit(found: Found) {
    let opened;
    try {
      opened = await db.sealer.openReporting(found.sealed, found.context);
    } catch (error) {
      if (error instanceof UnknownSealingKeyError) count(report.unknown, error.keyId ?? "no id");
      else report.damaged++;
      return;
    }
    if (!options.reseal || opened.current) {
      count(report.byKey, opened.keyId);
      return;
    }
    const resealed = await db.sealer.seal(opened.plaintext, found.context);
    const op = found.replace(resealed);
    // Other processes write the same KV file: a commit they got in before is tried again.
    if ((await retryWhileBusy(() => op.commit())).ok) {
      report.resealed[found.family]++;
      count(report.byKey, db.sealer.keyIds[0]);
    } else {
      report.skipped++;
    }
  }

  for await (
    const entry of db.kv.list<{ id: string; sealedConfig: string }>({
      prefix: destinationsPrefix(),
    })
  ) {
    await visit({
      family: "destinations",
      context: `destination:${entry.value.id}`,
      sealed: Uint8Array.fromBase64(entry.value.sealedConfig),
      replace: (resealed) =>
        db.kv.atomic().check(entry).set(entry.key, {
          ...entry.value,
          sealedConfig: resealed.toBase64(),
        }),
    });
  }
  for await (
    const entry of db.kv.list<{ id: string; sealedCaptchaSecret: string | null }>({
      prefix: formsPrefix(),
    })
  ) {
    if (entry.value.sealedCaptchaSecret === null) continue;
    await visit({
      family: "forms",
      context: `form:${entry.value.id}`,
      sealed: Uint8Array.fromBase64(entry.value.sealedCaptchaSecret),
      replace: (resealed) =>
        db.kv.atomic().check(entry).set(entry.key, {
          ...entry.value,
          sealedCaptchaSecret: resealed.toBase64(),
        }),
    });
  }
  for await (
    const entry of db.kv.list<Uint8Array<ArrayBuffer>>({ prefix: notifySettingsPrefix() })
  ) {
    const orgId = entry.key[1] as string;
    if (entry.key.length !== notifySettingsKey(orgId).length) continue;
    await visit({
      family: "notify_settings",
      context: `notify_settings:${orgId}`,
      sealed: entry.value,
      replace: (resealed) => db.kv.atomic().check(entry).set(entry.key, resealed),
    });
  }
  // An envelope's chunks are adjacent in the listing: gathered, then visited as one.
  let chunks: Deno.KvEntry<Uint8Array<ArrayBuffer>>[] = [];
  const visitEnvelope = async () => {
    const [, submittedAt, submissionId] = chunks[0].key as ReturnType<typeof envelopeChunkKey>;
    const gathered = chunks;
    chunks = [];
    // A partly expired envelope (chunk 0 gone) is no longer readable: nothing to reseal.
    if (gathered[0].key[3] !== 0) return;
    const expireIn = submittedAt + options.envelopeLifetimeMs - now();
    if (expireIn <= 0) return;
    await visit({
      family: "envelopes",
      context: `envelope:${submissionId}`,
      sealed: concatBytes(gathered.map((entry) => entry.value)),
      replace(resealed) {
        const op = db.kv.atomic();
        splitChunksInto(resealed, gathered.length).forEach((chunk, i) => {
          op.check(gathered[i]).set(envelopeChunkKey(submittedAt, submissionId, i), chunk, {
            expireIn,
          });
        });
        return op;
      },
    });
  };
  for await (const entry of db.kv.list<Uint8Array<ArrayBuffer>>({ prefix: envelopesPrefix() })) {
    if (chunks.length > 0 && entry.key[2] !== chunks[0].key[2]) await visitEnvelope();
    chunks.push(entry);
  }
  if (chunks.length > 0) await visitEnvelope();
  return report;
}
