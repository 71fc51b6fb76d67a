/**
 * The backlog bound on acceptance (BACKLOG_MAX_JOBS, BACKLOG_ORG_SHARE): a form whose
 * organization filled its share gets 503 with Retry-After, CORS and the HTML page, counted
 * among the form's refusals; other tenants' forms keep accepting, and nothing accepted is
 * lost.
 */
import assert from "node:assert/strict";
import { createOrg } from "../store/orgs.ts";
import { startHarness } from "./helpers/harness.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

Deno.test("past its organization's share of the backlog a form gets 503, another tenant's form 202", async () => {
  // 4 jobs in the process, 2 per organization; one slot per destination, so jobs wait.
  await using h = await startHarness({
    backlog: { maxJobs: 4, orgShare: 0.5 },
    deliveryConcurrency: 2,
  });
  let release!: () => void;
  const released = new Promise<void>((resolve) => release = resolve);
  await using sink = startWebhookSink(async () => {
    await released;
    return new Response("ok");
  });
  try {
    const form = await h.createForm({ allowedOrigins: ["https://site.example"] });
    await h.addDestination(form.id, { type: "webhook", config: { url: sink.url } });
    const origin = { origin: "https://site.example" };
    assert.equal((await h.submit(form.publicKey, { n: 1 }, origin)).status, 202);
    assert.equal((await h.submit(form.publicKey, { n: 2 }, origin)).status, 202);

    const refused = await h.submit(form.publicKey, { n: 3 }, origin);
    assert.equal(refused.status, 503);
    assert.equal(refused.headers.get("retry-after"), "10");
    assert.equal(refused.headers.get("access-control-allow-origin"), "https://site.example");
    assert.equal(
      (await refused.json()).error,
      "Too many submissions waiting for delivery: try again later",
    );
    // A person posting the plain HTML form gets a page saying so.
    const page = await h.request(`/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        accept: "text/html",
        ...origin,
      },
      body: "n=4",
    });
    assert.equal(page.status, 503);
    assert.equal(page.headers.get("retry-after"), "10");
    assert.match(await page.text(), /Too many submissions waiting for delivery/);
    // Its owner sees the visitors turned away among the form's refusals.
    const { days } = await (await h.admin("GET", `/forms/${form.id}/refusals?days=1`)).json();
    assert.equal(days[0].backlog, 2);

    // Another tenant's form still has room in the process's bound.
    const other = await createOrg(h.service.db, "Other org");
    const answer = await h.admin("POST", "/forms", { name: "Other" }, other);
    const otherForm = (await answer.json()).form;
    await h.admin("POST", `/forms/${otherForm.id}/destinations`, {
      type: "webhook",
      config: { url: sink.url },
    }, other);
    assert.equal((await h.submit(otherForm.publicKey, { other: 1 })).status, 202);

    // Once the backlog drains, the form accepts again; every accepted one arrived.
    release();
    await waitFor(() => sink.received.length === 3, { message: "the 3 accepted arrived" });
    await waitFor(() => h.service.engine!.stats().active === 0, { message: "the runs ended" });
    let last = "";
    await waitFor(async () => {
      const response = await h.submit(form.publicKey, { n: 5 }, origin);
      last = `${response.status} ${await response.text()}`;
      return response.status === 202;
    }, { message: () => `accepting again, last answer ${last}` });
    await waitFor(() => sink.received.length === 4, { message: "the 4th arrived" });
    assert.deepEqual(
      sink.received.map((r) => (r.json!.payload as Record<string, unknown>).n ?? "o").toSorted(),
      [1, 2, 5, "o"],
    );
  } finally {
    release();
  }
});
