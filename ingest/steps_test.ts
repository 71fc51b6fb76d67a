import assert from "node:assert/strict";
import type { IngestTarget } from "../store/form_cache.ts";
import type { FormRecord } from "../store/forms.ts";
import type { RateLimiter, RateSlot } from "../store/rate_limit.ts";
import type { NewSubmission, StoredSubmission, SubmissionWriter } from "../store/submissions.ts";
import type { FormRules } from "./form_rules.ts";
import { Refusal } from "./refusal.ts";
import {
  admitJobs,
  checkSpam,
  envelopeOf,
  type IngestParts,
  limitClient,
  MAX_METADATA_CHARS,
  parseSubmission,
  routeSubmission,
  sealAndStore,
} from "./steps.ts";
import type { Config } from "../config.ts";
import type { DeliveryEngine } from "../delivery/engine.ts";
import { createIngestLoad } from "../delivery/ingest_load.ts";
import { createDb, type Db } from "../store/db.ts";
import { createSealer } from "../store/sealing.ts";

const FORM: FormRecord = {
  id: "form_1",
  orgId: "org_1",
  name: "Contact",
  publicKey: "pk_aaaaaaaaaaaaaaaaaaaa",
  allowedOrigins: [],
  verifyCaptcha: false,
  sealedCaptchaSecret: null,
  enabled: true,
  honeypotField: "website",
  redirectUrl: null,
  createdAt: "2026-01-01T00:00:00.000Z",
  updatedAt: "2026-01-01T00:00:00.000Z",
};

const DESTINATIONS: IngestTarget["destinations"] = [
  { id: "dst_1", type: "webhook", held: false },
  { id: "dst_2", type: "webhook", held: true },
];

/** Form rules that must not be asked (a form without rules or routing). */
const NO_RULES: FormRules = {
  caught: () => Promise.reject(new Error("spam rules asked")),
  destinationsOf: () => Promise.reject(new Error("routing asked")),
};

async function refusal(promise: Promise<unknown>): Promise<Refusal> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof Refusal, String(error));
    return error;
  }
  assert.fail("expected a refusal");
}

Deno.test("limitClient reserves a slot under the client's address key, or refuses 429 with retryAfter", async () => {
  const asked: string[] = [];
  const slot: RateSlot = { count() {}, release() {} };
  let full = false;
  const rateLimiter: RateLimiter = {
    reserve(formId, key) {
      asked.push(`${formId}:${key}`);
      return Promise.resolve(full ? { retryAfter: 7 } : slot);
    },
    flush: () => Promise.resolve(),
  };
  const parts = { rateLimiter, addressRule: { header: null, trustedProxyHops: 0 } };
  const request = {
    form: FORM,
    header: undefined,
    remoteAddr: { transport: "tcp" as const, hostname: "203.0.113.9", port: 5000 },
  };
  const limited = await limitClient(parts, request);
  assert.equal(limited.slot, slot);
  assert.deepEqual(limited.client, { ip: "203.0.113.9", key: "203.0.113.9" });
  full = true;
  const error = await refusal(limitClient(parts, request));
  assert.equal(error.answer, "rateLimited");
  assert.equal(error.reason, "rate_limit");
  assert.equal(error.retryAfter, 7);
  assert.deepEqual(asked, ["form_1:203.0.113.9", "form_1:203.0.113.9"]);
});

Deno.test("parseSubmission refuses an empty body with 400 and parses a urlencoded one", async () => {
  const parts = { config: { ingestContentTypes: "any" } as unknown as Config };
  const empty = await refusal(
    parseSubmission(parts, { kind: "json", bytes: new Uint8Array(0), contentType: "" }),
  );
  assert.equal(empty.answer, "invalidJsonPayload");
  assert.equal(empty.message, "Invalid JSON payload");
  assert.equal(empty.detail, "Empty body");
  const payload = await parseSubmission(parts, {
    kind: "urlencoded",
    bytes: new TextEncoder().encode("name=Ada&msg=hi"),
    contentType: "application/x-www-form-urlencoded",
  });
  assert.deepEqual(payload, { name: "Ada", msg: "hi" });
});

Deno.test("checkSpam: a filled honeypot is spam without asking the rules; an empty one is taken out", async () => {
  const parts = { formRules: NO_RULES };
  const bot = await checkSpam(parts, FORM, { name: "bot", website: "http://x" });
  assert.equal(bot.caughtBy, "honeypot");
  const person: Record<string, unknown> = { name: "Ada", website: "" };
  assert.deepEqual(await checkSpam(parts, FORM, person), {
    caughtBy: null,
    observed: [],
    pageToken: null,
  });
  assert.deepEqual(person, { name: "Ada" });
});

Deno.test("routeSubmission: spam goes nowhere, an unrouted form to all destinations, none is nowhere", async () => {
  const parts = { formRules: NO_RULES };
  const target: IngestTarget = { form: FORM, destinations: DESTINATIONS, routed: false };
  assert.deepEqual(await routeSubmission(parts, { target, payload: {}, spam: true }), {
    destinations: [],
    nowhere: false,
  });
  assert.deepEqual(await routeSubmission(parts, { target, payload: {}, spam: false }), {
    destinations: DESTINATIONS,
    nowhere: false,
  });
  const bare = { ...target, destinations: [] };
  assert.deepEqual(await routeSubmission(parts, { target: bare, payload: {}, spam: false }), {
    destinations: [],
    nowhere: true,
  });
});

Deno.test("admitJobs asks room for the jobs not held, and none without an engine or jobs", async () => {
  const asked: number[] = [];
  let released = 0;
  const engine = {
    admission: {
      waitForRoom(_orgId: string, jobs: number) {
        asked.push(jobs);
        return Promise.resolve(() => released++);
      },
    },
  } as unknown as DeliveryEngine;
  const room = await admitJobs({ engine }, "org_1", DESTINATIONS);
  assert.deepEqual(asked, [1]);
  room?.();
  assert.equal(released, 1);
  assert.equal(await admitJobs({ engine }, "org_1", [DESTINATIONS[1]]), null);
  assert.equal(await admitJobs({ engine: null }, "org_1", DESTINATIONS), null);
  assert.deepEqual(asked, [1]);
});

Deno.test("envelopeOf cuts long request metadata and dates the submission", () => {
  const envelope = envelopeOf(FORM, {
    submissionId: "sub_1",
    payload: { a: 1 },
    metadata: { origin: null, ip: "::1", userAgent: "u".repeat(5000), referer: undefined },
    at: Date.UTC(2026, 0, 2),
  });
  assert.equal(envelope.formName, "Contact");
  assert.equal(envelope.metadata.userAgent?.length, MAX_METADATA_CHARS);
  assert.equal(envelope.metadata.referer, null);
  assert.equal(envelope.metadata.submittedAt, "2026-01-02T00:00:00.000Z");
});

Deno.test("sealAndStore answers 503 when the write fails, logging no payload, and leaves the load count", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db: Db = createDb(kv, await createSealer(new Uint8Array(32)));
    const lines: string[] = [];
    const ingestLoad = createIngestLoad();
    const writer = {
      write(_submission: NewSubmission): Promise<StoredSubmission> {
        return Promise.reject(new Error("commit failed"));
      },
    } as unknown as SubmissionWriter;
    const parts: Parameters<typeof sealAndStore>[0] = {
      db,
      writer,
      ingestLoad,
      engine: null,
      envelopeTtlMs: 60_000,
      logger: {
        debug() {},
        info() {},
        warn() {},
        error: (msg, fields) => lines.push(`${msg} ${JSON.stringify(fields)}`),
      } as IngestParts["logger"],
    };
    const envelope = envelopeOf(FORM, {
      submissionId: "sub_1",
      payload: { secret: "visitor's message" },
      metadata: { origin: null, ip: null, userAgent: undefined, referer: undefined },
      at: Date.now(),
    });
    const error = await refusal(
      sealAndStore(parts, envelope, {
        form: FORM,
        destinations: DESTINATIONS,
        submittedAt: 0,
        pageToken: null,
      }),
    );
    assert.equal(error.answer, "storeFailed");
    assert.equal(lines.length, 1);
    assert.match(lines[0], /submission not stored/);
    assert.doesNotMatch(lines[0], /visitor's message/);
    assert.equal(ingestLoad.burstMs("org_1"), null);
  } finally {
    kv.close();
  }
});
