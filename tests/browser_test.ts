/**
 * The example contact page (docs/examples/) in a real Chromium against a real formrelay:
 * a fetch submission with its CORS preflight, a plain HTML form post with its redirect,
 * a page on an origin the form does not allow, and a bot that fills the honeypot.
 * Screenshots of each step go to tests/artifacts/.
 */
import assert from "node:assert/strict";
import type { Browser, Page } from "./deps.ts";
import { launchChromium } from "./helpers/chromium.ts";
import { serveExamples } from "./helpers/examples.ts";
import { startHarness } from "./helpers/harness.ts";
import { freePort } from "../tools/ports.ts";
import { serveApp } from "./helpers/serve.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const ARTIFACTS = new URL("./artifacts/", import.meta.url);
/** Deadline for anything the browser does. */
const BROWSER_MS = 15_000;

async function screenshot(page: Page, name: string) {
  await Deno.mkdir(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: new URL(name, ARTIFACTS).pathname, fullPage: true });
}

/** The request log lines of the harness for one method and path (an accepted submission's too). */
function requestLogs(logs: string[], method: string, path: string) {
  const requestLine = (msg: string) => msg === "request" || msg === "submission accepted";
  return logs.map((line) => JSON.parse(line))
    .filter((line) => requestLine(line.msg) && line.method === method && line.path === path);
}

async function isEmpty(kv: Deno.Kv, prefix: string): Promise<boolean> {
  for await (const _ of kv.list({ prefix: [prefix] }, { limit: 1 })) return false;
  return true;
}

/** The envelope fields checked here. */
interface Envelope {
  submissionId: string;
  formId: string;
  formName: string;
  payload: Record<string, unknown>;
  metadata: { origin: string | null; referer: string | null; userAgent: string };
}

async function fillContact(page: Page, prefix: "fetch" | "plain", who: Record<string, string>) {
  await page.fill(`#${prefix}-name`, who.name);
  await page.fill(`#${prefix}-email`, who.email);
  await page.fill(`#${prefix}-message`, who.message);
}

Deno.test("the example contact page submits from Chromium: fetch with preflight, plain form with redirect, refused origin", async (t) => {
  // A captcha provider nothing listens for: an outage, for the form that verifies one.
  await using h = await startHarness({
    captchaVerifyUrl: `http://127.0.0.1:${freePort()}/siteverify`,
  });
  await using api = serveApp(h.service.app);
  await using sink = startWebhookSink();
  await using pages = await serveExamples();
  // One page server, two origins: "localhost" is allowed, "127.0.0.1" is not. Both differ
  // from the API's origin (another port), so every submission is cross-origin.
  const allowed = `http://localhost:${pages.port}`;
  const refused = `http://127.0.0.1:${pages.port}`;
  const form = await h.createForm({
    name: "Contact",
    allowedOrigins: [allowed],
    redirectUrl: `${allowed}/thanks.html`,
    honeypotField: "_gotcha",
  });
  const destinationId = await h.addDestination(form.id, {
    type: "webhook",
    config: { url: sink.url },
  });
  const submitPath = `/v1/f/${form.publicKey}`;
  const query = `?endpoint=${encodeURIComponent(api.origin)}&key=${form.publicKey}`;

  const ada = { name: "Ada Lovelace", email: "ada@example.com", message: "Hello from fetch" };
  const grace = { name: "Grace Hopper", email: "grace@example.com", message: "Hello from a form" };
  let fetchSubmissionId = "";
  let botSubmissionId = "";

  let browser: Browser | null = null;
  try {
    browser = await launchChromium(BROWSER_MS);
    const context = await browser.newContext();
    context.setDefaultTimeout(BROWSER_MS);

    await t.step(
      "fetch as JSON passes the CORS preflight and shows the submission id",
      async () => {
        const page = await context.newPage();
        await page.goto(`${allowed}/contact.html${query}`);
        await fillContact(page, "fetch", ada);
        await page.click("#fetch-form button[type=submit]");
        const status = await page.waitForSelector("#fetch-status[data-state=success]");
        const text = (await status.textContent()) ?? "";
        await screenshot(page, "browser-a-fetch-success.png");
        const match = text.match(/submission ([0-9a-f-]{36})/);
        assert.ok(match, `status text: ${text}`);
        fetchSubmissionId = match[1];
        assert.match(text, /^Thank you! Your message was sent/);
        const preflights = requestLogs(h.logs, "OPTIONS", submitPath);
        assert.deepEqual(preflights.map((line) => line.status), [204]);
        assert.deepEqual(requestLogs(h.logs, "POST", submitPath).map((line) => line.status), [202]);
        await page.close();
      },
    );

    await t.step(
      "the plain HTML form posts, gets 303 and lands on the thank-you page",
      async () => {
        const page = await context.newPage();
        await page.goto(`${allowed}/contact.html${query}`);
        assert.equal(
          await page.getAttribute("#plain-form", "action"),
          `${api.origin}${submitPath}`,
        );
        await fillContact(page, "plain", grace);
        const [landed] = await Promise.all([
          page.waitForResponse((r) =>
            r.request().isNavigationRequest() && new URL(r.url()).pathname === "/thanks.html"
          ),
          page.click("#plain-form button[type=submit]"),
        ]);
        await page.waitForURL(`${allowed}/thanks.html`);
        await page.waitForSelector("#thanks-message");
        await screenshot(page, "browser-b-plain-form-thanks.png");
        assert.ok(landed, "navigation response");
        assert.equal(new URL(page.url()).origin, allowed);
        assert.equal(landed.status(), 200);
        const post = landed.request().redirectedFrom();
        assert.ok(post, "the thank-you page was reached through a redirect");
        assert.equal(post.method(), "POST");
        assert.equal(post.url(), `${api.origin}${submitPath}`);
        assert.equal((await post.response())?.status(), 303);
        assert.match(await page.textContent("h1") ?? "", /Thank you/);
        await page.close();
      },
    );

    await t.step(
      "a page on an origin not in allowedOrigins shows that it was refused",
      async () => {
        const page = await context.newPage();
        await page.goto(`${refused}/contact.html${query}`);
        await fillContact(page, "fetch", {
          name: "Mallory",
          email: "mallory@example.com",
          message: "From an origin the form does not allow",
        });
        await page.click("#fetch-form button[type=submit]");
        const status = await page.waitForSelector("#fetch-status[data-state=error]");
        await screenshot(page, "browser-c-refused-origin.png");
        // The preflight is answered 403 without an allow-origin header: the browser never
        // sends the POST and the page only sees a TypeError.
        assert.equal(
          await status.textContent(),
          "Sorry, your message was not sent: this website is not allowed to send to this form " +
            "(its address is not in the form's allowed origins). Please reach us another way.",
        );
        assert.deepEqual(requestLogs(h.logs, "OPTIONS", submitPath).map((l) => l.status), [
          204,
          403,
        ]);
        assert.deepEqual(requestLogs(h.logs, "POST", submitPath).map((l) => l.status), [202, 303]);
        await page.close();
      },
    );

    await t.step(
      "a service that cannot be reached is said to be unreachable, not refusing",
      async () => {
        const closed = new URL(api.origin);
        closed.port = String(freePort());
        const page = await context.newPage();
        await page.goto(
          `${allowed}/contact.html?endpoint=${
            encodeURIComponent(closed.origin)
          }&key=${form.publicKey}`,
        );
        await fillContact(page, "fetch", ada);
        await page.click("#fetch-form button[type=submit]");
        const status = await page.waitForSelector("#fetch-status[data-state=error]");
        assert.match(await status.textContent() ?? "", /the form service could not be reached/);
        await page.close();
      },
    );

    await t.step("the plain form from a refused origin gets a readable 403 page", async () => {
      const page = await context.newPage();
      await page.goto(`${refused}/contact.html${query}`);
      await fillContact(page, "plain", {
        name: "Mallory",
        email: "mallory@example.com",
        message: "A plain post from an origin the form does not allow",
      });
      const [answer] = await Promise.all([
        page.waitForResponse((r) =>
          r.request().isNavigationRequest() && r.url().startsWith(api.origin)
        ),
        page.click("#plain-form button[type=submit]"),
      ]);
      await page.waitForURL(`${api.origin}${submitPath}`);
      await page.waitForSelector("h1");
      await screenshot(page, "browser-d-refused-plain-form.png");
      assert.ok(answer, "navigation response");
      assert.equal(answer.status(), 403);
      assert.match((await answer.headerValue("content-type")) ?? "", /^text\/html/);
      const text = await page.textContent("body") ?? "";
      assert.match(text, /Origin is not allowed for this form/);
      assert.match(
        text,
        /Nothing you entered is wrong/,
        "the visitor is not told to check the form",
      );
      await page.close();
    });

    await t.step(
      "a bot that fills the honeypot sees the same success and nothing is sent",
      async () => {
        const page = await context.newPage();
        await page.goto(`${allowed}/contact.html${query}`);
        await fillContact(page, "fetch", {
          name: "Spam Bot",
          email: "bot@example.com",
          message: "Buy now",
        });
        // The field is off screen, as people see the page; a bot fills it anyway.
        await page.fill("#fetch-gotcha", "https://spam.example", { force: true });
        await page.click("#fetch-form button[type=submit]");
        const status = await page.waitForSelector("#fetch-status[data-state=success]");
        await screenshot(page, "browser-e-honeypot.png");
        const match = ((await status.textContent()) ?? "").match(/submission ([0-9a-f-]{36})/);
        assert.ok(match);
        botSubmissionId = match[1];
        await page.close();
      },
    );

    await t.step(
      "a captcha service outage asks the visitor to try again, by fetch and on the page",
      async () => {
        const guarded = await h.createForm({
          name: "Guarded",
          allowedOrigins: [allowed],
          verifyCaptcha: true,
          captchaSecret: "captcha-secret",
        });
        const page = await context.newPage();
        await page.goto(
          `${allowed}/contact.html?endpoint=${
            encodeURIComponent(api.origin)
          }&key=${guarded.publicKey}`,
        );
        // What a captcha widget adds to each form: its token in a hidden field.
        await page.evaluate(`for (const form of document.forms) {
          const token = document.createElement("input");
          Object.assign(token, { type: "hidden", name: "h-captcha-response", value: "t" });
          form.append(token);
        }`);
        await fillContact(page, "fetch", ada);
        await page.click("#fetch-form button[type=submit]");
        const status = await page.waitForSelector("#fetch-status[data-state=error]");
        assert.match(
          (await status.textContent()) ?? "",
          /could not be checked just now: please try again in a few minutes/,
        );
        await fillContact(page, "plain", grace);
        await page.click("#plain-form button[type=submit]");
        await page.waitForURL(`${api.origin}/v1/f/${guarded.publicKey}`);
        assert.match(
          await page.textContent("body") ?? "",
          /Nothing you entered is wrong: please go back and try again in a few minutes/,
        );
        await page.close();
      },
    );

    await context.close();
  } finally {
    await browser?.close();
  }

  // Only the two accepted submissions reach the webhook, once each: wait until every
  // delivery job is finished (none left in KV), then count.
  let outcomes: { submissionId: string; destinationId: string; status: string }[] = [];
  await waitFor(async () => {
    outcomes = (await (await h.admin("GET", `/forms/${form.id}/deliveries`)).json()).deliveries;
    return outcomes.filter((o) => o.status === "delivered").length >= 2 &&
      await isEmpty(h.service.db.kv, "jobs") && await isEmpty(h.service.db.kv, "envelopes");
  }, {
    message: () => `deliveries: ${JSON.stringify(outcomes)}; sink: ${sink.received.length}`,
    timeoutMs: 15_000,
  });
  assert.equal(outcomes.length, 2);
  assert.ok(outcomes.every((o) => o.destinationId === destinationId && o.status === "delivered"));
  assert.ok(botSubmissionId !== "" && outcomes.every((o) => o.submissionId !== botSubmissionId));
  assert.equal(sink.received.length, 2);
  assert.equal(sink.hits, 2);

  const envelopes = sink.received.map((r) => r.json as unknown as Envelope);
  const byName = new Map(envelopes.map((e) => [e.payload.name, e]));
  const fromFetch = byName.get(ada.name);
  const fromForm = byName.get(grace.name);
  assert.ok(fromFetch && fromForm, `payload names: ${[...byName.keys()].join(", ")}`);

  assert.equal(fromFetch.submissionId, fetchSubmissionId);
  assert.equal(fromFetch.formId, form.id);
  assert.equal(fromFetch.formName, "Contact");
  // The empty honeypot field is taken out of the payload.
  assert.deepEqual(fromFetch.payload, ada);
  assert.equal(fromFetch.metadata.origin, allowed);
  // Chromium's default referrer policy sends only the origin to another origin.
  assert.equal(fromFetch.metadata.referer, `${allowed}/`);
  assert.match(fromFetch.metadata.userAgent, /Chrome\//);

  assert.notEqual(fromForm.submissionId, fetchSubmissionId);
  assert.equal(fromForm.formId, form.id);
  assert.equal(fromForm.formName, "Contact");
  assert.deepEqual(fromForm.payload, grace);
  assert.equal(fromForm.metadata.origin, allowed);
  assert.equal(fromForm.metadata.referer, `${allowed}/`);
  assert.match(fromForm.metadata.userAgent, /Chrome\//);
});
