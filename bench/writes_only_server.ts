/**
 * formrelay's writes alone, for bench:ingest: the bare durable ingest's server
 * (`Deno.serve`, `JSON.parse`, `202` after the commit), storing what formrelay stores as
 * formrelay stores it: the envelope built (ingest/steps.ts) and sealed (AES-256-GCM), written by the
 * submission writer through the group committer (the sealed chunk with its TTL, two job
 * records, one queue wake-up per commit marked as this process's), the queue listened to.
 * No checks, no rate limit, no framework, no delivery: what is left of the request path is
 * what no configuration of the service can leave out, so its ratio to the bare durable
 * ingest is the ceiling of formrelay's.
 *
 * Usage: deno run -A --unstable-kv bench/writes_only_server.ts PORT KV_PATH
 */
import { envelopeOf } from "../ingest/steps.ts";
import { openDb } from "../store/db.ts";
import { listenForWakes } from "../store/due_jobs.ts";
import { sealEnvelope } from "../store/envelope.ts";
import { createSealer } from "../store/sealing.ts";
import { submissionIdAt } from "../store/submission_id.ts";
import { createSubmissionWriter } from "../store/submissions.ts";

const [port, kvPath] = Deno.args;
const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
const db = await openDb(kvPath, sealer, { queues: true });
const writer = createSubmissionWriter(db);
listenForWakes(db, () => {});
const form = { id: crypto.randomUUID(), orgId: crypto.randomUUID(), name: "Bench" };
const destinations = [crypto.randomUUID(), crypto.randomUUID()]
  .map((id) => ({ id, type: "webhook" as const }));

Deno.addSignalListener("SIGTERM", () => Deno.exit(0));
Deno.serve({ hostname: "127.0.0.1", port: Number(port), onListen() {} }, async (request) => {
  let payload: unknown;
  try {
    payload = JSON.parse(await request.text());
  } catch {
    return Response.json({ ok: false }, { status: 400 });
  }
  const at = Date.now();
  const submissionId = submissionIdAt(at);
  const envelope = envelopeOf(form, {
    submissionId,
    payload,
    metadata: {
      origin: null,
      ip: request.headers.get("x-forwarded-for"),
      userAgent: undefined,
      referer: undefined,
    },
    at,
  });
  await writer.write({
    submissionId,
    formId: form.id,
    orgId: form.orgId,
    sealedEnvelope: (await sealEnvelope(sealer, envelope)).sealed,
    destinations,
    submittedAt: at,
    envelopeTtlMs: 24 * 3600 * 1000,
  }, { wokenHere: true });
  return Response.json({ ok: true, submissionId }, { status: 202 });
});
