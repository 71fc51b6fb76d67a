import assert from "node:assert/strict";
import { startHarness } from "../tests/helpers/harness.ts";
import { countJobs, countPausedDestinations, createBacklogReader } from "./backlog.ts";
import { recordHealth } from "./destination_health.ts";
import { waitFor } from "../tests/helpers/wait.ts";

Deno.test("countJobs counts jobs by state up to its bound, and says when it stopped there", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  await h.addDestination(form.id, { type: "webhook", config: { url: "http://127.0.0.1:9/" } });
  for (let i = 0; i < 3; i++) assert.equal((await h.submit(form.publicKey, { i })).status, 202);
  const { db } = h.service;
  const now = Date.now();
  assert.deepEqual(await countJobs(db, { now, limit: 10 }), {
    due: 3,
    inFlight: 0,
    retrying: 0,
    held: 0,
    truncated: false,
  });
  assert.deepEqual(await countJobs(db, { now, limit: 2 }), {
    due: 2,
    inFlight: 0,
    retrying: 0,
    held: 0,
    truncated: true,
  });
});

Deno.test("the backlog reader reads the KV at most once per cache period", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  await h.addDestination(form.id, { type: "webhook", config: { url: "http://127.0.0.1:9/" } });
  let clock = 1_000_000_000_000;
  const reader = createBacklogReader(h.service.db, { cacheMs: 5000, now: () => clock });
  assert.equal((await reader.read()).jobs.due, 0);
  assert.equal((await h.submit(form.publicKey, { a: 1 })).status, 202);
  clock += 4999;
  assert.equal((await reader.read()).jobs.due, 0, "cached");
  clock = Date.now() + 10_000;
  assert.equal((await reader.read()).jobs.due, 1, "read again");
});

Deno.test("countPausedDestinations counts destinations paused for their health, not the tenant's", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const url = "http://127.0.0.1:9/";
  const failing = await h.addDestination(form.id, { type: "webhook", config: { url } });
  const switchedOff = await h.addDestination(form.id, { type: "webhook", config: { url } });
  await h.addDestination(form.id, { type: "webhook", config: { url } });
  const { db } = h.service;
  const job = { formId: form.id, destinationId: failing };
  const signal = { delivered: false as const, blame: "destination" as const, error: "503" };
  const now = Date.now();
  assert.equal(await recordHealth(db, job, signal, { pauseAfterMs: 1000, now }), null);
  assert.equal(
    await recordHealth(db, job, signal, { pauseAfterMs: 1000, now: now + 2000 }),
    "paused",
  );
  const patched = await h.admin("PATCH", `/forms/${form.id}/destinations/${switchedOff}`, {
    isEnabled: false,
  });
  assert.equal(patched.status, 200);
  assert.deepEqual(await countPausedDestinations(db, { limit: 10 }), {
    paused: 1,
    truncated: false,
  });
});

Deno.test("countJobs counts the jobs held for a paused destination as held, not due", async () => {
  await using h = await startHarness();
  const form = await h.createForm();
  const url = "http://127.0.0.1:9/";
  const destinationId = await h.addDestination(form.id, { type: "webhook", config: { url } });
  const { db } = h.service;
  const signal = { delivered: false as const, blame: "destination" as const, error: "503" };
  const job = { formId: form.id, destinationId };
  await recordHealth(db, job, signal, { pauseAfterMs: 1000, now: Date.now() - 2000 });
  assert.equal(
    await recordHealth(db, job, signal, { pauseAfterMs: 1000, now: Date.now() }),
    "paused",
  );
  assert.equal((await h.submit(form.publicKey, { a: 1 })).status, 202);
  await waitFor(async () => (await countJobs(db, { now: Date.now(), limit: 10 })).held === 1, {
    message: "the job held",
  });
  assert.equal((await countJobs(db, { now: Date.now(), limit: 10 })).due, 0);
});
