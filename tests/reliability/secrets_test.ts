/**
 * Reliability 5: secrets in destination URLs stay secret. Webhook and script web app
 * URLs carry their secret in the path and query; SMTP relays carry a password. The
 * service is made to fail in every way it can (connection refused, 404, 500, time-out,
 * redirects to a URL with the secret, an unresolvable host, auth refused, test sends),
 * then again with the address guard on (refused and unresolvable hosts), and every KV
 * file (WAL included) and every log line of both runs are searched for the secrets.
 */
import assert from "node:assert/strict";
import { type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { freePort } from "../../tools/ports.ts";
import { startSmtpServer } from "../helpers/smtp_server.ts";
import { waitFor } from "../helpers/wait.ts";
import {
  type AdminClient,
  adminClient,
  createFormWith,
  findPlaintext,
  loopbackSmtpConfig,
  prepareWorkspace,
  submit,
} from "./helpers/cluster.ts";

type Form = { formId: string; destinationIds: string[] };

/**
 * Waits until every destination of `form` has failed at least once, checks that no
 * recorded error text holds a secret, and returns the error texts.
 */
async function failures(admin: AdminClient, form: Form, secrets: string[]): Promise<string> {
  type Outcome = { destinationId: string; lastError: string | null };
  let outcomes: Outcome[] = [];
  await waitFor(async () => {
    const answer = await admin("GET", `/forms/${form.formId}/deliveries?limit=100`);
    outcomes = answer.body.deliveries;
    const failed = new Set(outcomes.filter((o) => o.lastError).map((o) => o.destinationId));
    return form.destinationIds.every((id) => failed.has(id));
  }, { timeoutMs: 30_000, message: () => JSON.stringify(outcomes) });
  for (const outcome of outcomes) {
    for (const secret of secrets) {
      assert.ok(!outcome.lastError!.includes(secret), outcome.lastError!);
    }
  }
  return outcomes.map((o) => o.lastError).join("\n");
}

/** A test send to every destination, each failing (the tenant's own answer may say more). */
async function testSends(admin: AdminClient, form: Form): Promise<void> {
  for (const id of form.destinationIds) {
    const answer = await admin("POST", `/forms/${form.formId}/destinations/${id}/test`);
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.result.delivered, false, answer.text);
  }
}

Deno.test("URL paths, queries and relay passwords never reach logs or KV", async () => {
  const marker = `path-secret-${crypto.randomUUID()}`;
  const password = `relay-pass-${crypto.randomUUID()}`;
  const closedPort = freePort();
  const released = Promise.withResolvers<void>();
  const controller = new AbortController();
  const sink = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen() {} },
    async (request) => {
      await request.body?.cancel();
      const path = new URL(request.url).pathname;
      const to = (target: string) =>
        new Response(null, { status: 302, headers: { location: target } });
      if (path.startsWith("/404/")) return new Response("gone", { status: 404 });
      if (path.startsWith("/500/")) return new Response("oops", { status: 500 });
      if (path.startsWith("/hang/")) {
        await released.promise;
        return new Response("too late");
      }
      if (path.startsWith("/away/")) {
        return to(`http://127.0.0.1:${closedPort}/${marker}?k=${marker}`);
      }
      if (path.startsWith("/exec/")) return to(`/final/${marker}?key=${marker}`);
      if (path.startsWith("/final/")) return new Response("script error", { status: 500 });
      return new Response("unexpected", { status: 400 });
    },
  );
  const sinkOrigin = `http://127.0.0.1:${sink.addr.port}`;
  const smtp = await startSmtpServer({ mode: "off" });
  // Destinations failing by their own fault for a few milliseconds are paused, with a reason.
  const workspace = await prepareWorkspace(1, { DESTINATION_PAUSE_AFTER_HOURS: "0.000001" });
  const service = await startServiceProcess(workspace.env, { stderr: "piped" });
  const services: ServiceProcess[] = [service];
  try {
    const admin = adminClient(() => service.origin, workspace.orgs[0].tenantKey);
    const secretPart = `${marker}?token=${marker}&x=1`;
    const webhook = (url: string) => ({ type: "webhook", config: { url } });
    const sheets = (url: string) => ({ type: "sheets_webhook", config: { url } });
    const form = await createFormWith(admin, "Secrets", [
      webhook(`http://127.0.0.1:${closedPort}/refused/${secretPart}`),
      webhook(`${sinkOrigin}/404/${secretPart}`),
      webhook(`${sinkOrigin}/500/${secretPart}`),
      webhook(`${sinkOrigin}/hang/${secretPart}`),
      webhook(`${sinkOrigin}/away/${secretPart}`),
      webhook(`http://user:${marker}@unresolvable-${crypto.randomUUID()}.invalid/${secretPart}`),
      sheets(`${sinkOrigin}/exec/${secretPart}`),
      sheets(`${sinkOrigin}/away/${secretPart}`),
      { type: "smtp", config: { ...loopbackSmtpConfig(smtp.port), password } },
    ]);
    assert.equal((await submit(service.origin, form.publicKey, { a: 1 })).status, 202);

    const errors = await failures(admin, form, [marker, password]);
    assert.match(errors, /no answer within \d+ ms/, "the hanging destination timed out");
    assert.match(errors, new RegExp(`"${sinkOrigin}": 404 Not Found`));
    assert.match(errors, /\.invalid"/, "the unresolvable host is named");

    // Destinations failing again (retries) are paused, each with a reason.
    type Listed = { health: { state: string; reason: string | null } };
    let reasons: string[] = [];
    await waitFor(async () => {
      const listed = await admin("GET", `/forms/${form.formId}/destinations`);
      reasons = listed.body.destinations
        .filter((d: Listed) => d.health.state === "paused")
        .map((d: Listed) => d.health.reason ?? "");
      return reasons.length >= 1;
    }, { timeoutMs: 20_000, message: "a destination paused" });
    for (const reason of reasons) assert.ok(!reason.includes(marker), reason);

    await testSends(admin, form);
    // Private addresses are refused at save with the guard on: saved here, where they are
    // allowed, then delivered (and refused) by a guarded process on the same KV.
    const strictForm = await createFormWith(admin, "Guarded", [
      webhook(`http://unresolvable-${crypto.randomUUID()}.invalid/${secretPart}`),
      webhook(`http://user:${marker}@10.0.0.1/${secretPart}`),
      webhook(`http://127.0.0.1:${closedPort}/${secretPart}`),
      sheets(`https://unresolvable-${crypto.randomUUID()}.invalid/${secretPart}`),
    ]);
    await service.kill("SIGTERM");

    // With the address guard on, the same KV: refused, unresolvable and pinned destinations.
    const guarded = await startServiceProcess(
      { ...workspace.env, ALLOW_PRIVATE_DESTINATIONS: "false" },
      { stderr: "piped" },
    );
    services.push(guarded);
    const strictAdmin = adminClient(() => guarded.origin, workspace.orgs[0].tenantKey);
    assert.equal((await submit(guarded.origin, strictForm.publicKey, { a: 1 })).status, 202);
    const strictErrors = await failures(strictAdmin, strictForm, [marker]);
    assert.match(strictErrors, /Cannot resolve "unresolvable-[^"]*\.invalid"/);
    assert.match(strictErrors, /Destination address is not allowed: "10\.0\.0\.1"/);
    await testSends(strictAdmin, strictForm);
    await guarded.kill("SIGTERM");

    const logs = services.flatMap((s) => [...s.lines, ...s.stderrLines]);
    assert.ok(logs.some((line) => line.includes('"delivery attempt"')), "attempts were logged");
    assert.ok(logs.some((line) => line.includes('"test send"')), "test sends were logged");
    assert.deepEqual(await findPlaintext(marker, { dir: workspace.dir, logs }), []);
    assert.deepEqual(await findPlaintext(password, { dir: workspace.dir, logs }), []);
  } finally {
    for (const process of services) await process.kill("SIGKILL");
    released.resolve();
    controller.abort();
    await sink.finished;
    await smtp.close();
    await workspace.remove();
  }
});
