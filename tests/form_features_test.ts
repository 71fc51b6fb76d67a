import assert from "node:assert/strict";
import { startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";

const WEBHOOK = { type: "webhook", config: { url: "https://hooks.example.com/in" } };
const BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

type H = Awaited<ReturnType<typeof startHarness>>;

async function storedPayloads(h: H) {
  const { openEnvelope } = await import("../store/envelope.ts");
  const payloads: unknown[] = [];
  for await (
    const entry of h.service.db.kv.list<Uint8Array<ArrayBuffer>>({ prefix: ["envelopes"] })
  ) {
    const submissionId = entry.key[2] as string;
    payloads.push((await openEnvelope(h.service.db.sealer, submissionId, entry.value)).payload);
  }
  return payloads;
}

Deno.test("honeypot: a filled honeypot is answered like a real submission but nothing is kept", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm({ honeypotField: "_gotcha" });
  await h.addDestination(form.id, WEBHOOK);
  const spam = await h.submit(form.publicKey, { name: "Bot", _gotcha: "http://spam.example" });
  const real = await h.submit(form.publicKey, { name: "Ada", _gotcha: "" });
  assert.equal(spam.status, 202);
  assert.equal(real.status, 202);
  const spamBody = await spam.json();
  assert.equal(spamBody.ok, true);
  assert.match(spamBody.submissionId, /^[0-9a-f-]{36}$/);
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 1, "only the real submission has a job");
  assert.deepEqual(await storedPayloads(h), [{ name: "Ada" }], "the empty honeypot is stripped");
  const form2 = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: "name=Bot&_gotcha=x",
  });
  assert.equal(form2.status, 202);
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 1);
});

Deno.test("redirectUrl: a browser form post is answered 303 to the form's thank-you page", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm({ redirectUrl: "https://site.example/thanks" });
  await h.addDestination(form.id, WEBHOOK);
  const response = await h.request(`/v1/f/${form.publicKey}?redirect=https://evil.example`, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      accept: BROWSER_ACCEPT,
      referer: "https://evil.example/",
    },
    body: "name=Ada",
  });
  assert.equal(response.status, 303);
  assert.equal(response.headers.get("location"), "https://site.example/thanks");
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 1);
  const fd = new FormData();
  fd.append("name", "Grace");
  const multipart = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { accept: BROWSER_ACCEPT },
    body: fd,
  });
  assert.equal(multipart.status, 303);
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 2);
});

Deno.test("fetch callers keep JSON answers on a form with redirectUrl", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm({ redirectUrl: "https://site.example/thanks" });
  await h.addDestination(form.id, WEBHOOK);
  for (const accept of ["application/json", "*/*", "application/json, text/html;q=0.5"]) {
    const response = await h.request(`/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", accept },
      body: "name=Ada",
    });
    assert.equal(response.status, 202, accept);
    assert.match(response.headers.get("content-type") ?? "", /application\/json/);
    assert.equal((await response.json()).ok, true);
  }
});

Deno.test("a browser form post without redirectUrl gets a small thank-you page", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const response = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", accept: BROWSER_ACCEPT },
    body: "name=Ada",
  });
  assert.equal(response.status, 202);
  assert.match(response.headers.get("content-type") ?? "", /text\/html/);
  assert.match(await response.text(), /Your submission was received/);
});

Deno.test("errors of browser form posts are readable HTML pages with the reason", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm({
    redirectUrl: "https://site.example/thanks",
    allowedOrigins: ["https://site.example"],
  });
  const post = (body: string, headers: Record<string, string> = {}) =>
    h.request(`/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        accept: BROWSER_ACCEPT,
        origin: "https://site.example",
        ...headers,
      },
      body,
    });
  const cases: [Response, number, RegExp][] = [
    [await post("a=%ZZ"), 400, /check what you entered and send it again.*Invalid form payload/s],
    [
      await post("a=1", { origin: "https://evil.example" }),
      403,
      // The visitor cannot fix this one: they are not told to check the form.
      /Nothing you entered is wrong: please tell the site.{1,5}s owner.*Origin is not allowed for this form/s,
    ],
  ];
  const unknown = await h.request("/v1/f/pk_unknownunknownunknown", {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", accept: BROWSER_ACCEPT },
    body: "a=1",
  });
  cases.push([unknown, 404, /no longer takes messages.*Form endpoint not found or disabled/s]);
  for (const [response, status, reason] of cases) {
    assert.equal(response.status, status);
    assert.match(response.headers.get("content-type") ?? "", /text\/html/);
    const html = await response.text();
    assert.match(html, reason);
    assert.match(html, /<title>Your submission was not sent<\/title>/);
    if (status !== 400) assert.doesNotMatch(html, /check what you entered/);
  }
});

Deno.test("the HTML error page escapes what it shows", async () => {
  const { errorPage } = await import("../ingest/pages.ts");
  const html = errorPage(400, `<script>alert("x")</script>`);
  assert.ok(!html.includes("<script>"));
  assert.match(html, /&#60;script&#62;/);
});

Deno.test("rate limit: per form and client IP, 429 Too many submissions with Retry-After", async () => {
  await using h = await startHarness({
    rateLimit: { max: 3, windowMs: 60_000 },
    clientIpHeader: "cf-connecting-ip",
  }, { deliver: false });
  const form = await h.createForm();
  const other = await h.createForm({ name: "Other" });
  const from = (ip: string) => ({ "cf-connecting-ip": ip });
  for (let i = 0; i < 3; i++) {
    assert.equal((await h.submit(form.publicKey, { i }, from("198.51.100.1"))).status, 202);
  }
  const limited = await h.submit(form.publicKey, { i: 4 }, from("198.51.100.1"));
  assert.equal(limited.status, 429);
  const body = await limited.json();
  assert.equal(body.error, "Too many submissions");
  const retryAfter = Number(limited.headers.get("retry-after"));
  assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
  assert.equal((await h.submit(form.publicKey, { i: 5 }, from("198.51.100.2"))).status, 202);
  assert.equal((await h.submit(other.publicKey, { i: 6 }, from("198.51.100.1"))).status, 202);
});

Deno.test("rate limit: slots are reserved, counted or released; a new window starts afresh", async () => {
  const { createRateLimiter } = await import("../store/rate_limit.ts");
  await using h = await startHarness({}, { deliver: false });
  let clock = Date.UTC(2026, 0, 1, 12, 0, 30);
  const limiter = createRateLimiter(h.service.db, { max: 2, windowMs: 60_000, now: () => clock });
  const slot = async () => {
    const reserved = await limiter.reserve("f", "1.2.3.4");
    assert.ok(!("retryAfter" in reserved), "a slot is free");
    return reserved;
  };
  const first = await slot();
  const second = await slot();
  assert.deepEqual(await limiter.reserve("f", "1.2.3.4"), { retryAfter: 30 }, "both reserved");
  second.release();
  const third = await slot();
  first.count();
  third.count();
  third.release(); // settled already: no effect
  assert.deepEqual(await limiter.reserve("f", "1.2.3.4"), { retryAfter: 30 }, "both counted");
  clock += 30_000;
  (await slot()).release();
  // Another process sharing the KV counts what is stored, kept under a keyed hash, from
  // the client's second submission there (its first is one no process sees).
  clock -= 30_000;
  const { waitFor } = await import("./helpers/wait.ts");
  const client = h.service.db.sealer.pseudonym("1.2.3.4");
  assert.ok(!client.includes("1.2.3.4"));
  const stored = async () => {
    const prefix = ["rate", "f", client, Math.floor(clock / 60_000)];
    const entries = await Array.fromAsync(h.service.db.kv.list<number>({ prefix }));
    return entries.reduce((sum, entry) => sum + entry.value, 0);
  };
  await waitFor(async () => await stored() === 2);
  const fresh = createRateLimiter(h.service.db, { max: 2, windowMs: 60_000, now: () => clock });
  (await fresh.reserve("f", "1.2.3.4") as { count(): void }).count();
  assert.deepEqual(await fresh.reserve("f", "1.2.3.4"), { retryAfter: 30 });
  const off = createRateLimiter(h.service.db, { max: 0, windowMs: 60_000, now: () => clock });
  assert.ok(!("retryAfter" in await off.reserve("f", "1.2.3.4")), "max 0 turns the limit off");
});

Deno.test("rate limit: one-off visitors cost no KV write; a client's second submission on is stored", async () => {
  const { createRateLimiter } = await import("../store/rate_limit.ts");
  const { countKeys } = await import("./helpers/kv.ts");
  const { waitFor } = await import("./helpers/wait.ts");
  await using h = await startHarness({}, { deliver: false });
  const limiter = createRateLimiter(h.service.db, { max: 4, windowMs: 600_000 });
  const submit = async (client: string) => {
    const slot = await limiter.reserve("f", client);
    assert.ok(!("retryAfter" in slot));
    slot.count();
  };
  for (let i = 0; i < 100; i++) await submit(`198.51.100.${i}`);
  await submit("203.0.113.1");
  await submit("203.0.113.1");
  await waitFor(async () => await countKeys(h.service.db.kv, "rate") === 1);
  // A restarted process reads the stored count once the client comes near the limit.
  const restarted = createRateLimiter(h.service.db, { max: 4, windowMs: 600_000 });
  (await restarted.reserve("f", "203.0.113.1") as { count(): void }).count();
  const third = await restarted.reserve("f", "203.0.113.1");
  assert.ok(!("retryAfter" in third));
  third.count();
  assert.ok("retryAfter" in await restarted.reserve("f", "203.0.113.1"), "2 stored + 2 here");
});

Deno.test("rate limit: a service is counted by the other processes before it admits anything", async () => {
  const { countLiveProcesses } = await import("../store/process_shares.ts");
  await using h = await startHarness({});
  // Read straight after start, before any request: its record is already there.
  assert.equal(await countLiveProcesses(h.service.db), 1);
});
