/**
 * Hostile clients against a real guarded listener, in process: slow bodies, the body
 * memory budget, forged address headers and concurrent requests racing the rate limit.
 * The heavier scenarios (descriptor limits, thousands of connections, RSS) are in
 * tests/reliability/hostile_test.ts.
 */
import assert from "node:assert/strict";
import type { Config } from "../config.ts";
import { startHarness } from "./helpers/harness.ts";
import { readAll, startGuardedHarness, startSlowPost } from "./helpers/slow_post.ts";
import { waitFor } from "./helpers/wait.ts";

const encoder = new TextEncoder();

/** The harness behind a guarded listener; `http` overrides are merged into the defaults. */
const setUp = (overrides: Partial<Config> = {}) =>
  startGuardedHarness({ ...overrides, http: overrides.http });

Deno.test("a body not complete within HTTP_BODY_TIMEOUT_MS is 408 and its connection closed", async () => {
  await using s = await setUp({
    http: { ...(await import("./helpers/config.ts")).testConfig().http, bodyTimeoutMs: 300 },
  });
  const conn = await startSlowPost(s.port, `/v1/f/${s.form.publicKey}`, { length: 131_000 });
  const answer = await readAll(conn);
  assert.match(answer, /^HTTP\/1\.1 408 /);
  assert.match(answer, /connection: close/i);
  assert.match(answer, /"error":"Request body not received in time"/);
});

Deno.test("past the body memory budget a newcomer takes the room of the oldest body still arriving", async () => {
  const base = (await import("./helpers/config.ts")).testConfig();
  await using s = await setUp({
    // Room for two 128 KB bodies, one per client.
    http: { ...base.http, bodyMemoryBytes: 262_144, bodyClientBytes: 131_072 },
    clientIpHeader: "x-forwarded-for",
    rateLimit: { max: 0, windowMs: 60_000 },
  });
  const path = `/v1/f/${s.form.publicKey}`;
  const first = await startSlowPost(s.port, path, { length: 131_000 });
  const post = (ip: string) =>
    fetch(`http://127.0.0.1:${s.port}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-forwarded-for": ip },
      body: JSON.stringify({ pad: "x".repeat(130_000) }),
    });
  // The slow body has no forwarded header: its client is 127.0.0.1, which holds its share.
  await waitFor(() => s.h.service.bodyGate.stats().bytes === 131_000, {
    message: "the slow body is admitted",
  });
  const sameClient = await post("127.0.0.1");
  assert.equal(sameClient.status, 503, "its client has no room left");
  assert.equal(sameClient.headers.get("retry-after"), "1");
  assert.equal((await sameClient.json()).error, "Server busy: try again later");
  const refusals = await s.h.admin("GET", `/forms/${s.form.id}/refusals?days=1`);
  assert.equal((await refusals.json()).days[0].busy, 1, "its owner sees the visitor turned away");
  const other = await post("198.51.100.2");
  assert.equal(other.status, 202, "another client still has room");
  await other.body?.cancel();
  const second = await startSlowPost(s.port, path, {
    length: 131_000,
    forwardedFor: "198.51.100.9",
  });
  await waitFor(() => s.h.service.bodyGate.stats().bytes === 262_000);
  // The budget is full of bodies still arriving: the oldest gives way (408) to a newcomer.
  const newcomer = await post("198.51.100.3");
  assert.equal(newcomer.status, 202);
  await newcomer.body?.cancel();
  assert.match(await readAll(first), /^HTTP\/1\.1 408 /);
  second.close();
});

Deno.test("forged address headers are ignored by default: 300 posts with 300 addresses meet the limit", async () => {
  await using s = await setUp({ rateLimit: { max: 60, windowMs: 600_000 } });
  const statuses = new Map<number, number>();
  for (let i = 0; i < 300; i++) {
    const response = await fetch(`http://127.0.0.1:${s.port}/v1/f/${s.form.publicKey}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "cf-connecting-ip": `203.0.${i >> 8}.${i & 255}`,
        "x-forwarded-for": `198.51.${i >> 8}.${i & 255}`,
      },
      body: "{}",
    });
    await response.body?.cancel();
    statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
  }
  assert.deepEqual(Object.fromEntries(statuses), { 202: 60, 429: 240 });
});

Deno.test("200 concurrent slow bodies from one address give exactly RATE_LIMIT_MAX accepted", async () => {
  await using s = await setUp({ rateLimit: { max: 60, windowMs: 600_000 } });
  const body = '{"padding":"' + "x".repeat(2000) + '"}';
  const conns = await Promise.all(
    Array.from(
      { length: 200 },
      () =>
        startSlowPost(s.port, `/v1/f/${s.form.publicKey}`, {
          length: body.length,
          start: body.slice(0, 10),
        }),
    ),
  );
  const answers = conns.map((conn) => readAll(conn));
  // Every head is in and answered or admitted before any body completes.
  const refusals = () => s.h.logs.filter((line) => line.includes('"status":429')).length;
  await waitFor(() => refusals() >= 140, { message: () => `${refusals()} refused so far` });
  await Promise.all(conns.map((conn) => conn.write(encoder.encode(body.slice(10))).catch(() => 0)));
  const statuses = (await Promise.all(answers)).map((a) => Number(a.slice(9, 12)));
  const count = (status: number) => statuses.filter((s) => s === status).length;
  assert.equal(count(202), 60);
  assert.equal(count(429), 140);
});

Deno.test("the largest envelope a body under 128 KB can make is accepted and delivered", async () => {
  const { startWebhookSink } = await import("./helpers/sink.ts");
  await using sink = startWebhookSink();
  await using h = await startHarness({ rateLimit: { max: 0, windowMs: 60_000 } });
  const form = await h.createForm({ name: "F".repeat(200) });
  // Twenty destinations, the most a form may have: the commit holds twenty jobs too.
  for (let i = 0; i < 20; i++) {
    await h.addDestination(form.id, { type: "webhook", config: { url: `${sink.url}/${i}` } });
  }
  // Quotes cost one byte in a multipart body and two (`\"`) in JSON: the most a field can
  // grow since form fields lose their control characters (six bytes each in JSON).
  const boundary = "b";
  const head = `--${boundary}\r\ncontent-disposition: form-data; name="m"\r\n\r\n`;
  const tail = `\r\n--${boundary}--\r\n`;
  const value = '"'.repeat(131_072 - head.length - tail.length);
  const response = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: {
      "content-type": `multipart/form-data; boundary=${boundary}`,
      "user-agent": "\\".repeat(60_000),
      referer: "https://site.example/" + '"'.repeat(60_000),
      origin: "https://site.example",
    },
    body: head + value + tail,
  });
  assert.equal(response.status, 202, await response.clone().text());
  await waitFor(() => sink.received.length === 20, {
    timeoutMs: 30_000,
    message: () => `${sink.received.length} of 20 delivered`,
  });
  const delivered = sink.received[0].json as { payload: { m: string } };
  assert.equal(delivered.payload.m, value);
  assert.ok(sink.received[0].body.length > 2 * value.length, "the envelope is twice the body");
});

Deno.test("a destination config whose stored form would not fit in KV is 413, never 500", async () => {
  await using h = await startHarness({}, { deliver: false });
  const form = await h.createForm();
  const withHeader = (size: number) => ({
    type: "webhook",
    config: { url: "https://hooks.example.com/in", headers: { "x-pad": "p".repeat(size) } },
  });
  const tooLarge = await h.admin("POST", `/forms/${form.id}/destinations`, withHeader(56_000));
  assert.equal(tooLarge.status, 413);
  assert.equal((await tooLarge.json()).error, "Destination config too large (max 40KB)");
  const fits = await h.admin("POST", `/forms/${form.id}/destinations`, withHeader(40_000));
  assert.equal(fits.status, 200);
  const { destination } = await fits.json();
  const patched = await h.admin(
    "PATCH",
    `/forms/${form.id}/destinations/${destination.id}`,
    { config: withHeader(56_000).config },
  );
  assert.equal(patched.status, 413);
  assert.ok(!h.logs.some((line) => line.includes('"level":"error"')), "nothing went wrong inside");
});
