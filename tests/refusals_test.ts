import assert from "node:assert/strict";
import { expectError } from "./helpers/assert.ts";
import { startHarness } from "./helpers/harness.ts";
import { formKey } from "../store/keys.ts";
import {
  createRefusalCounter,
  MAX_REFUSED_ORIGINS,
  readRefusals,
  readRefusedOrigins,
} from "../store/refusals.ts";

const DAY = "2026-11-24";

Deno.test("refusals are counted per form, reason and day and shown to the tenant, never the submission", async () => {
  await using h = await startHarness({ rateLimit: { max: 3, windowMs: 60_000 } }, {
    deliver: false,
  });
  const form = await h.createForm({
    allowedOrigins: ["https://site.example"],
    honeypotField: "_gotcha",
    verifyCaptcha: true,
    captchaSecret: "secret",
  });
  await h.addDestination(form.id, { type: "webhook", config: { url: "https://hooks.example/in" } });
  const other = await h.createForm({ name: "Other" });
  const marker = `marker-${crypto.randomUUID()}`;
  const site = { origin: "https://site.example" };

  await expectError(
    await h.submit(form.publicKey, { marker }, { origin: "https://evil.example" }),
    403,
    "Origin is not allowed for this form",
  );
  await expectError(
    await h.submit(form.publicKey, { marker }, site),
    400,
    "Captcha token is required",
  );
  const big = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...site },
    body: JSON.stringify({ marker, pad: "x".repeat(140_000) }),
  });
  assert.equal(big.status, 413);
  await big.body?.cancel();
  await expectError(
    await h.request(`/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...site },
      body: `{"marker": "${marker}"`,
    }),
    400,
    "Invalid JSON payload",
  );
  // A format the service does not take: the page needs fixing, its owner should know.
  const typed = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "text/plain", ...site },
    body: marker,
  });
  assert.equal(typed.status, 415);
  await typed.body?.cancel();
  // Past the rate limit (3 accepted per client here), on a form of its own.
  const rated = await h.createForm({ name: "Rated", honeypotField: "_gotcha" });
  await h.addDestination(rated.id, {
    type: "webhook",
    config: { url: "https://hooks.example/in" },
  });
  for (let i = 0; i < 2; i++) assert.equal((await h.submit(rated.publicKey, { i })).status, 202);
  const bot = await h.submit(rated.publicKey, { marker, _gotcha: "https://spam.example" });
  assert.equal(bot.status, 202, "a bot is answered as a person is");
  assert.equal((await bot.json()).warning, undefined);
  await expectError(await h.submit(rated.publicKey, { marker }), 429, "Too many submissions");
  const ratedDays = (await (await h.admin("GET", `/forms/${rated.id}/refusals`)).json()).days;
  assert.equal(ratedDays[6].rate_limit, 1);
  assert.equal(ratedDays[6].spam, 1);

  // A form with no enabled destination: accepted, with a warning, and counted.
  const nowhere = await h.submit(other.publicKey, { marker });
  assert.equal(nowhere.status, 202);
  const answer = await nowhere.json();
  assert.match(answer.warning, /^This form has no enabled destination/);

  const response = await h.admin("GET", `/forms/${form.id}/refusals?days=2`);
  assert.equal(response.status, 200);
  const { days } = await response.json();
  assert.equal(days.length, 2);
  const today = days[1];
  assert.equal(today.day, new Date().toISOString().slice(0, 10));
  assert.deepEqual({ ...today, day: undefined, spamByRule: undefined, observedByRule: undefined }, {
    day: undefined,
    spamByRule: undefined,
    observedByRule: undefined,
    origin: 1,
    captcha: 1,
    captcha_unavailable: 0,
    size: 1,
    type: 1,
    invalid: 1,
    rate_limit: 0,
    backlog: 0,
    busy: 0,
    store_failed: 0,
    spam: 0,
    nowhere: 0,
  });
  const otherDays = (await (await h.admin("GET", `/forms/${other.id}/refusals`)).json()).days;
  assert.equal(otherDays.length, 7);
  assert.equal(otherDays[6].nowhere, 1);
  await expectError(
    await h.admin("GET", `/forms/${form.id}/refusals?days=31`),
    400,
    "Validation error",
  );

  // Counts only: nothing of the submissions is in KV in plaintext.
  for await (const entry of h.service.db.kv.list({ prefix: [] })) {
    assert.ok(
      !JSON.stringify(entry, (_, v) => typeof v === "bigint" ? String(v) : v)
        .includes(marker),
    );
  }
});

Deno.test("the refusal counter writes sums at most every interval and on flush, and prunes old days", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = { kv } as Parameters<typeof createRefusalCounter>[0];
    let now = Date.parse(`${DAY}T10:00:00Z`);
    const counter = createRefusalCounter(db, { flushMs: 1000, now: () => now });
    const form = crypto.randomUUID();
    await kv.set(formKey(form), { id: form });
    counter.count(form, "origin");
    counter.count(form, "origin");
    counter.count(form, "spam");
    let stored = 0;
    for await (const _ of kv.list({ prefix: ["refusals"] })) stored++;
    assert.equal(stored, 0, "not written before the interval");
    const read = () => readRefusals(db, form, { days: 1, now, counter });
    assert.equal((await read())[0].origin, 2, "unwritten counts are read too");

    now += 1000;
    counter.count(form, "origin"); // past the interval: this one writes all
    await counter.flush();
    assert.deepEqual(counter.pending(form), []);
    const [today] = await read();
    assert.equal(today.origin, 3);
    assert.equal(today.spam, 1);

    // 31 days later the old counts are pruned when read.
    now += 31 * 86_400_000;
    assert.equal((await read())[0].origin, 0);
    let left = 0;
    for await (const _ of kv.list({ prefix: ["refusals"] })) left++;
    assert.equal(left, 0);
  } finally {
    kv.close();
  }
});

Deno.test("a site refused at the CORS preflight (a page posting with fetch) counts as the form's origin refusal, and the form lists the last few distinct refused sites", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm({ allowedOrigins: ["https://site.example"] });
  const preflight = (origin: string) =>
    h.request(`/v1/f/${form.publicKey}`, {
      method: "OPTIONS",
      headers: {
        origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type",
      },
    });
  const refusalsOf =
    async () => (await (await h.admin("GET", `/forms/${form.id}/refusals`)).json());

  await expectError(
    await preflight("https://blog.example"),
    403,
    "Origin is not allowed for this form",
  );
  const allowed = await preflight("https://site.example");
  assert.equal(allowed.status, 204);
  let answer = await refusalsOf();
  assert.equal(answer.days[6].origin, 1, "the refused preflight is counted, the allowed one not");
  assert.deepEqual(answer.refusedOrigins.map((o: { origin: string }) => o.origin), [
    "https://blog.example",
  ]);
  assert.ok(!Number.isNaN(Date.parse(answer.refusedOrigins[0].lastSeen)));

  // A POST refused for its origin is listed too; each site once, newest first, at most 5.
  await expectError(
    await h.submit(form.publicKey, { a: 1 }, { origin: "https://old.example/page?x=1" }),
    403,
    "Origin is not allowed for this form",
  );
  for (let i = 0; i < 6; i++) await (await preflight(`https://s${i}.example`)).body?.cancel();
  await (await preflight("https://blog.example")).body?.cancel();
  answer = await refusalsOf();
  assert.equal(answer.days[6].origin, 9);
  assert.deepEqual(answer.refusedOrigins.map((o: { origin: string }) => o.origin), [
    "https://blog.example",
    "https://s5.example",
    "https://s4.example",
    "https://s3.example",
    "https://s2.example",
  ]);
  assert.equal(answer.refusedOrigins.length, MAX_REFUSED_ORIGINS);
});

Deno.test("refused origins are kept like the counts: gathered, written at the interval, merged, bounded, expiring", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = { kv } as Parameters<typeof createRefusalCounter>[0];
    let now = Date.parse(`${DAY}T10:00:00Z`);
    const counter = createRefusalCounter(db, { flushMs: 1000, now: () => now });
    const form = crypto.randomUUID();
    await kv.set(formKey(form), { id: form });
    counter.refusedOrigin(form, "https://a.example");
    now += 10;
    counter.refusedOrigin(form, "https://b.example");
    counter.refusedOrigin(form, "https://" + "x".repeat(300) + ".example");
    assert.equal((await kv.get(["refused_origins", form])).value, null, "not written yet");
    const names = async () => (await readRefusedOrigins(db, form, counter)).map((o) => o.origin);
    assert.deepEqual(await names(), ["https://b.example", "https://a.example"]);
    await counter.flush();
    assert.deepEqual(counter.pendingOrigins(form), []);
    now += 10;
    counter.refusedOrigin(form, "https://a.example");
    await counter.flush();
    assert.deepEqual(await names(), ["https://a.example", "https://b.example"]);
    for (let i = 0; i < 10; i++) {
      now += 10;
      counter.refusedOrigin(form, `https://${i}.example`);
    }
    await counter.flush();
    const kept = (await kv.get<unknown[]>(["refused_origins", form])).value!;
    assert.equal(kept.length, MAX_REFUSED_ORIGINS);
    assert.deepEqual(await names(), [9, 8, 7, 6, 5].map((i) => `https://${i}.example`));
  } finally {
    kv.close();
  }
});

Deno.test("counts and refused sites of a form deleted before they are written are dropped, not written back", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const db = { kv } as Parameters<typeof createRefusalCounter>[0];
    const counter = createRefusalCounter(db, { flushMs: 60_000 });
    const [kept, deleted] = [crypto.randomUUID(), crypto.randomUUID()];
    await kv.set(formKey(kept), { id: kept });
    await kv.set(formKey(deleted), { id: deleted });
    for (const form of [kept, deleted]) {
      counter.count(form, "origin");
      counter.refusedOrigin(form, "https://a.example");
    }
    await kv.delete(formKey(deleted));
    await counter.flush();
    const keys: Deno.KvKey[] = [];
    for await (const entry of kv.list({ prefix: [] })) {
      if (entry.key[0] !== "forms") keys.push(entry.key);
    }
    assert.deepEqual(keys.map((key) => [key[0], key[1]]).sort(), [
      ["refusals", kept],
      ["refused_origins", kept],
    ]);
  } finally {
    kv.close();
  }
});
