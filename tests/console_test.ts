/**
 * The tenant console in a real Chromium against a real formrelay: from an empty
 * organization to a delivered submission, the test send, an API validation error at
 * its field, a hostile form name shown as text, a destination disabled for its health
 * and re-enabled, key rotation, sign-out, an axe-core scan of every view, and the
 * security headers. Screenshots of each view go to tests/artifacts/.
 */
import assert from "node:assert/strict";
import { getDestination } from "../store/destinations.ts";
import { AxeBuilder, type Browser, type BrowserContext, type Page } from "./deps.ts";
import { destinationFailingKey } from "../store/keys.ts";
import { launchChromium } from "./helpers/chromium.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const ARTIFACTS = new URL("./artifacts/", import.meta.url);
const BROWSER_MS = 15_000;
const XSS_NAME = "<img src=x onerror=alert(1)>";

async function screenshot(page: Page, name: string) {
  await Deno.mkdir(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: new URL(name, ARTIFACTS).pathname, fullPage: true });
}

/** Serious and critical axe-core violations of the page as it is now. */
async function axeViolations(page: Page): Promise<string[]> {
  const results = await new AxeBuilder({ page }).analyze();
  return results.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

/**
 * Table headers and badges whose text takes more than one line (a word broken inside,
 * "deliv/ered"): each is one or two words that must stay whole.
 */
function brokenWords(page: Page): Promise<string[]> {
  return page.evaluate<string[]>(`[...document.querySelectorAll("th, .badge")]
    .filter((element) => {
      const range = document.createRange();
      range.selectNodeContents(element);
      const tops = [...range.getClientRects()].map((rect) => Math.round(rect.top));
      return new Set(tops).size > 1;
    })
    .map((element) => element.textContent)`);
}

/** The error text shown beside the field of an API path. */
function fieldError(page: Page, path: string) {
  return page.locator(`[data-error-for="${path}"]`);
}

Deno.test("the console serves its files with security headers, and nothing outside its folder", async () => {
  await using h = await startHarness();
  const page = await h.request("/");
  assert.equal(page.status, 200);
  assert.match(page.headers.get("content-type") ?? "", /^text\/html/);
  const csp = page.headers.get("content-security-policy") ?? "";
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/);
  assert.equal(page.headers.get("x-content-type-options"), "nosniff");
  assert.equal(page.headers.get("referrer-policy"), "no-referrer");
  assert.doesNotMatch(await page.text(), /<script(?![^>]*\bsrc=)/, "no inline script");

  const script = await h.request("/console/app.js");
  assert.equal(script.status, 200);
  assert.match(script.headers.get("content-type") ?? "", /^text\/javascript/);
  assert.equal(script.headers.get("x-content-type-options"), "nosniff");
  await script.body?.cancel();
  for (const path of ["/console/..%2fserve.ts", "/console/serve.ts", "/console/nope.js"]) {
    const missing = await h.request(path);
    assert.equal(missing.status, 404, path);
    await missing.body?.cancel();
  }

  // Another site cannot use the admin API from a signed-in tenant's browser: the key is in
  // no cookie, and the API grants no CORS, so a page elsewhere cannot even send the header.
  const preflight = await h.request("/v1/admin/forms", {
    method: "OPTIONS",
    headers: {
      origin: "https://evil.example",
      "access-control-request-method": "POST",
      "access-control-request-headers": "content-type, x-tenant-key",
    },
  });
  assert.equal(preflight.headers.get("access-control-allow-origin"), null);
  assert.equal(preflight.headers.get("access-control-allow-headers"), null);
  assert.equal(preflight.headers.get("set-cookie"), null);
  await preflight.body?.cancel();

  const post = await h.request("/", { method: "POST" });
  assert.equal(post.status, 405);
  assert.deepEqual(await post.json(), { ok: false, error: "Method not allowed" });

  const docs = await h.request("/v1/docs");
  assert.equal(docs.status, 200);
  assert.match(docs.headers.get("content-security-policy") ?? "", /script-src 'self'(;|$)/);
  assert.doesNotMatch(await docs.text(), /https?:\/\//, "no outside resources");
  const bundle = await h.request("/v1/docs/swagger-ui-bundle.js");
  assert.equal(bundle.status, 200);
  assert.ok((await bundle.arrayBuffer()).byteLength > 100_000);
  const other = await h.request("/v1/docs/package.json");
  assert.equal(other.status, 404);
  await other.body?.cancel();
});

Deno.test("a tenant uses the console in Chromium: from an empty organization to a delivered submission", async (t) => {
  await using h = await startHarness({ pauseAfterMs: 1, retryScheduleMs: [] });
  await using api = serveApp(h.service.app);
  await using sink = startWebhookSink();
  await using gone = startWebhookSink(() => new Response("gone", { status: 410 }));

  const problems: string[] = [];
  let browser: Browser | null = null;
  let context: BrowserContext | null = null;
  try {
    browser = await launchChromium(BROWSER_MS);
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(BROWSER_MS);
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: api.origin });
    const page = await context.newPage();
    // Script errors, CSP violations and native dialogs (an alert() would be an injection).
    page.on("pageerror", (error) => problems.push(`pageerror: ${error.message}`));
    // 4xx answers the console expects (a wrong key, a validation error) are logged as
    // "Failed to load resource": not problems.
    page.on("console", (m) => {
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
        problems.push(`console: ${m.text()}`);
      }
    });
    page.on("dialog", (d) => {
      problems.push(`dialog: ${d.message()}`);
      d.dismiss();
    });
    // Every request the console makes: none may carry the key in its URL.
    const urls: string[] = [];
    page.on("request", (r) => urls.push(r.url()));

    const navLink = (name: string) =>
      page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true });
    const views: string[] = [];
    /** Screenshot and accessibility scan of a view. */
    const check = async (name: string) => {
      await screenshot(page, `console-${String(views.length + 1).padStart(2, "0")}-${name}.png`);
      assert.deepEqual(await axeViolations(page), [], `axe on ${name}`);
      views.push(name);
    };

    let formId = "";
    let publicKey = "";
    let currentKey = h.tenantKey;

    await t.step(
      "sign in: a wrong key is refused at its field, the right one opens the empty list",
      async () => {
        await page.goto(`${api.origin}/`);
        await page.getByLabel("Tenant key").fill("sk_wrong");
        await page.getByRole("button", { name: "Sign in" }).click();
        await waitFor(async () => (await fieldError(page, "key").textContent()) !== "");
        assert.equal(await fieldError(page, "key").textContent(), "Invalid tenant key");
        await check("sign-in");
        await page.getByLabel("Tenant key").fill(h.tenantKey);
        await page.getByRole("button", { name: "Sign in" }).click();
        await page.getByText("No forms yet").waitFor();
        await check("forms-empty");
        assert.equal(await page.evaluate(() => sessionStorage.length), 1);
        assert.equal(await page.evaluate(() => localStorage.length), 0);
        assert.equal((await context!.cookies()).length, 0);
      },
    );

    await t.step(
      "create a form; its snippets carry the public key and honeypot and copy in one click",
      async () => {
        await page.getByRole("link", { name: "New form" }).click();
        await page.getByLabel("Name").fill("Contact");
        await check("form-new");
        await page.getByRole("button", { name: "Create form" }).click();
        await page.getByRole("heading", { name: "HTML form" }).waitFor();
        formId = page.url().split("/").at(-2)!;
        await page.getByText("Submissions to this form go nowhere yet").waitFor();
        const { forms } = await (await h.admin("GET", "/forms")).json();
        assert.equal(forms.length, 1);
        assert.equal(forms[0].id, formId);
        publicKey = forms[0].publicKey;
        assert.equal(forms[0].honeypotField, "_gotcha");
        await page.getByRole("button", { name: "Copy HTML form" }).click();
        await page.getByText("Copied").first().waitFor();
        const copied = await page.evaluate<string>("navigator.clipboard.readText()");
        assert.ok(copied.includes(`action="${api.origin}/v1/f/${publicKey}"`), copied);
        assert.ok(copied.includes('name="_gotcha"'), copied);
        const fetchVersion = await page.locator("#snippet-fetch").textContent() ?? "";
        assert.ok(fetchVersion.includes(`fetch("${api.origin}/v1/f/${publicKey}"`), fetchVersion);
        await check("snippet");
        // Sending nowhere is flagged in the list of forms too.
        await navLink("Forms").click();
        await page.getByText("No destination", { exact: true }).waitFor();
        await page.getByRole("link", { name: "Contact" }).click();
      },
    );

    await t.step(
      "a webhook with a bad URL shows the API's error beside the URL field",
      async () => {
        await page.getByRole("link", { name: "Destinations" }).click();
        await page.getByText("No destinations yet").waitFor();
        await page.getByRole("button", { name: "Add…" }).click();
        await page.getByLabel("URL", { exact: true }).fill("not a url");
        await page.getByLabel("Headers").fill("X-Token: abc");
        await page.getByRole("button", { name: "Add destination" }).click();
        await waitFor(async () => (await fieldError(page, "config.url").textContent()) !== "");
        assert.match(
          await fieldError(page, "config.url").textContent() ?? "",
          /^Enter a full web address like https:/,
        );
        assert.equal(
          await page.getByLabel("URL", { exact: true }).getAttribute("aria-invalid"),
          "true",
        );
        assert.equal(await fieldError(page, "config.headers").textContent(), "");
        await check("destination-error");
        await page.getByLabel("URL", { exact: true }).fill(`${sink.url}?token=s3cret`);
        await page.getByRole("button", { name: "Add destination" }).click();
        await page.locator("[data-destination]").waitFor();
        // The query of a URL may hold a secret: the console shows origin and path only.
        assert.doesNotMatch(await page.locator("[data-destination]").textContent() ?? "", /s3cret/);
      },
    );

    await t.step("send a test and see its outcome", async () => {
      await page.getByRole("button", { name: "Send test" }).click();
      const outcome = page.locator(".test-outcome.ok");
      await outcome.waitFor();
      assert.match(await outcome.textContent() ?? "", /^Test delivered \(200\) in \d+ ms$/);
      assert.equal(sink.received.length, 1);
      assert.equal(sink.received[0].headers.get("x-token"), "abc");
      assert.equal((sink.received[0].json?.payload as { test: boolean }).test, true);
      await check("destinations");
    });

    await t.step(
      "each type has its fields; an error at config.to.1 shows at Recipients",
      async () => {
        const addKind = async (kind: string) => {
          await page.getByLabel("Add a destination").selectOption(kind);
          await page.getByRole("button", { name: "Add…" }).click();
        };
        await addKind("smtp_relay");
        await page.getByLabel("SMTP host").fill("127.0.0.1");
        await page.getByLabel("Port", { exact: true }).fill("2525");
        assert.equal(await page.getByLabel("Secure transport").inputValue(), "starttls");
        await page.getByLabel("Username").fill("mailer");
        await page.getByLabel("Password").fill("hunter2");
        await page.getByLabel("From address").fill("forms@example.com");
        await page.getByLabel("Recipients").fill("ada@example.com\nnot-an-address");
        await page.getByLabel("Subject").fill("New: {{formName}}");
        await page.getByRole("button", { name: "Add destination" }).click();
        await waitFor(async () => (await fieldError(page, "config.to").textContent()) !== "");
        assert.match(await fieldError(page, "config.to").textContent() ?? "", /^Line 2: .*email/i);
        assert.equal(await page.getByLabel("Recipients").getAttribute("aria-invalid"), "true");
        await check("destination-smtp-error");
        await page.getByLabel("Recipients").fill("ada@example.com\ngrace@example.com");
        await page.getByRole("button", { name: "Add destination" }).click();
        await page.locator("[data-destination]").nth(1).waitFor();

        await addKind("sheets_webhook");
        assert.deepEqual(
          await page.getByLabel("Method").locator("option").allTextContents(),
          ["POST", "PUT"],
        );
        await page.getByLabel("Script web app URL").fill(sink.url);
        await page.getByLabel("Authorization header").fill("Bearer sheet");
        await page.getByRole("button", { name: "Add destination" }).click();
        await page.locator("[data-destination]").nth(2).waitFor();

        // The platform relay is not configured here: the console does not offer it.
        assert.deepEqual(
          await page.getByLabel("Add a destination").locator("option").evaluateAll(
            (options) => options.map((option) => option.getAttribute("value")),
          ),
          ["webhook", "sheets_webhook", "smtp_relay", "slack", "discord", "teams", "telegram"],
        );

        const { destinations } = await (await h.admin("GET", `/forms/${formId}/destinations`))
          .json();
        assert.deepEqual(destinations.map((d: { type: string }) => d.type), [
          "webhook",
          "smtp",
          "sheets_webhook",
        ]);
        assert.deepEqual(destinations[1].config.to, ["ada@example.com", "grace@example.com"]);
        assert.equal(destinations[1].config.subjectTemplate, "New: {{formName}}");
        assert.equal(destinations[2].config.authHeader, "********");

        // Deleted behind the console's back: what the console then tries is refused, and said.
        const smtp = page.locator(`[data-destination="${destinations[1].id}"]`);
        await h.admin("DELETE", `/forms/${formId}/destinations/${destinations[1].id}`);
        await smtp.getByRole("button", { name: "Send test" }).click();
        await smtp.getByText("Test not sent: Destination not found").waitFor();
        await smtp.getByRole("button", { name: "Disable" }).click();
        await page.getByRole("alert").getByText("That did not work: Destination not found")
          .waitFor();

        // Deleting asks first.
        const sheets = page.locator(`[data-destination="${destinations[2].id}"]`);
        await sheets.getByRole("button", { name: "Delete" }).click();
        await page.getByRole("dialog").getByRole("button", { name: "Delete destination" }).click();
        await sheets.waitFor({ state: "detached" });
        await page.reload();
        await page.locator("[data-destination]").waitFor();
        assert.equal(await page.locator("[data-destination]").count(), 1);
      },
    );

    await t.step("editing keeps stored secrets; disable and enable", async () => {
      const card = page.locator("[data-destination]");
      await card.getByRole("button", { name: "Edit" }).click();
      assert.equal(await page.getByLabel("Headers").inputValue(), "X-Token: ********");
      // The list shows the URL's query value as ******** too: saved as shown, it is kept.
      assert.match(await page.getByLabel("URL", { exact: true }).inputValue(), /\?token=\*{8}$/);
      await page.getByRole("button", { name: "Save" }).click();
      await page.locator("form.editor").waitFor({ state: "detached" });
      await card.getByRole("button", { name: "Send test" }).click();
      await card.locator(".test-outcome.ok").waitFor();
      assert.equal(sink.received.at(-1)?.headers.get("x-token"), "abc", "the stored value kept");
      const id = await card.getAttribute("data-destination") ?? "";
      const stored = await getDestination(h.service.db, formId, id);
      assert.match((stored?.config as { url: string }).url, /\?token=s3cret$/);
      await card.getByRole("button", { name: "Edit" }).click();
      await page.getByLabel("Headers").fill("X-Token: def");
      await page.getByRole("button", { name: "Save" }).click();
      await page.locator("form.editor").waitFor({ state: "detached" });
      await card.getByRole("button", { name: "Disable" }).click();
      await card.getByText("Disabled", { exact: true }).waitFor();
      await card.getByRole("button", { name: "Enable" }).click();
      await card.getByText("Enabled", { exact: true }).waitFor();
      await card.getByRole("button", { name: "Send test" }).click();
      await card.locator(".test-outcome.ok").waitFor();
      assert.equal(sink.received.at(-1)?.headers.get("x-token"), "def");
      // The list redraws after a change; the result read a moment ago stays.
      await card.getByRole("button", { name: "Disable" }).click();
      await card.getByText("Disabled", { exact: true }).waitFor();
      assert.match(await card.locator(".test-outcome").textContent() ?? "", /^Test delivered/);
      await card.getByRole("button", { name: "Enable" }).click();
      await card.getByText("Enabled", { exact: true }).waitFor();
    });

    await t.step("a submission is delivered and shown as delivered", async () => {
      const response = await fetch(`${api.origin}/v1/f/${publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email: "ada@example.com", message: "Hello" }),
      });
      assert.equal(response.status, 202);
      const { submissionId } = await response.json();
      await waitFor(() => sink.received.some((r) => r.json?.submissionId === submissionId));
      // A bot in the spam trap: answered as a person is, counted on the Deliveries tab.
      const bot = await fetch(`${api.origin}/v1/f/${publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email: "bot@example.com", _gotcha: "https://spam.example" }),
      });
      assert.equal(bot.status, 202);
      await bot.body?.cancel();
      await page.getByRole("link", { name: "Deliveries" }).click();
      const spam = page.getByRole("region", { name: "Not delivered" }).locator(
        'tr[data-reason="spam"]',
      );
      await spam.waitFor();
      assert.match(await spam.textContent() ?? "", /^Blocked as spam11/);
      const row = page.locator('tr[data-status="delivered"]');
      await row.waitFor();
      assert.match(await row.textContent() ?? "", /Webhook POST http:\/\/127\.0\.0\.1.*delivered1/);
      assert.match(await page.locator("svg[role=img] title").textContent() ?? "", /1 delivered/);
      await check("deliveries");
    });

    await t.step(
      "a destination disabled for its health is flagged with its reason and re-enabled",
      async () => {
        const goneId = await h.addDestination(formId, {
          type: "webhook",
          config: { url: gone.url },
        });
        // Paused once it has failed for DESTINATION_PAUSE_AFTER_HOURS (1 ms here): two failures.
        assert.equal((await h.submit(publicKey, { message: "to both" })).status, 202);
        await waitFor(async () =>
          (await h.service.db.kv.get(destinationFailingKey(goneId))).value !== null
        );
        assert.equal((await h.submit(publicKey, { message: "to both again" })).status, 202);
        let destinations: { isEnabled: boolean; health: { state: string } }[] = [];
        await waitFor(async () => {
          destinations = (await (await h.admin("GET", `/forms/${formId}/destinations`)).json())
            .destinations;
          return destinations.some((d) => d.health.state === "paused");
        }, { message: () => JSON.stringify(destinations) });
        await page.getByRole("button", { name: "Refresh" }).click();
        const alert = page.getByRole("region", { name: "Destinations needing attention" });
        await alert.waitFor();
        assert.match(
          await alert.textContent() ?? "",
          /Paused since .*: Failing since .*410 Gone\. New submissions are held until you resume it\./,
        );
        await page.getByLabel("Status").selectOption("failed");
        assert.equal(await page.locator("tbody tr[data-status]").count(), 2);
        assert.equal(await page.locator('tbody tr[data-status="failed"]').count(), 2);
        await check("deliveries-health");
        // The Destinations tab says "Paused" (not "Enabled") and offers Resume there too.
        await page.getByRole("link", { name: "Destinations" }).click();
        const paused = page.locator(`[data-destination="${goneId}"]`);
        await paused.getByText("Paused", { exact: true }).waitFor();
        assert.equal(await paused.getByText("Enabled", { exact: true }).count(), 0);
        await paused.getByRole("button", { name: "Resume" }).click();
        await paused.getByText("Enabled", { exact: true }).waitFor();
        await paused.getByText(/^Resumed: \d+ held submissions? sent again\.$/).waitFor();
        await page.getByRole("link", { name: "Deliveries" }).click();
        await page.locator("tr[data-status]").first().waitFor();
        assert.equal(await alert.count(), 0);
        const after = (await (await h.admin("GET", `/forms/${formId}/destinations`)).json())
          .destinations;
        assert.ok(after.every((d: { isEnabled: boolean }) => d.isEnabled));
      },
    );

    await t.step("a form named like markup shows those characters", async () => {
      await h.createForm({ name: XSS_NAME });
      await navLink("Forms").click();
      const link = page.getByRole("link", { name: XSS_NAME });
      await link.waitFor();
      assert.equal(await link.textContent(), XSS_NAME);
      assert.equal(await page.locator("main img").count(), 0);
      await link.click();
      await page.getByRole("heading", { level: 1, name: XSS_NAME }).waitFor();
      await check("form-settings");
    });

    await t.step("edit a form's settings, with the API's errors at their fields", async () => {
      assert.equal(await page.getByLabel("Honeypot field").inputValue(), "");
      await page.getByLabel("Allowed origins").fill("https://shop.example\nnot an origin");
      await page.getByLabel(/Require a captcha/).check();
      await page.getByRole("button", { name: "Save" }).click();
      await waitFor(async () => (await fieldError(page, "allowedOrigins").textContent()) !== "");
      assert.match(await fieldError(page, "allowedOrigins").textContent() ?? "", /^Line 2: /);
      await page.getByLabel("Allowed origins").fill("https://shop.example/contact");
      await page.getByRole("button", { name: "Save" }).click();
      await waitFor(async () => (await fieldError(page, "captchaSecret").textContent()) !== "");
      assert.equal(
        await fieldError(page, "captchaSecret").textContent(),
        "Give the captcha secret when verifyCaptcha is true",
      );
      await page.getByLabel("Captcha secret").fill("0x0000000000000000000000000000000000000000");
      await page.getByLabel("Redirect URL").fill("https://shop.example/thanks");
      await page.getByLabel(/^Enabled/).uncheck();
      await page.getByRole("button", { name: "Save" }).click();
      await page.getByText("Saved.").waitFor();
      const { forms } = await (await h.admin("GET", "/forms")).json();
      const saved = forms.find((f: { name: string }) => f.name === XSS_NAME);
      assert.deepEqual(saved.allowedOrigins, ["https://shop.example"]);
      assert.equal(saved.verifyCaptcha, true);
      assert.equal(saved.hasCaptchaSecret, true);
      assert.equal(saved.redirectUrl, "https://shop.example/thanks");
      assert.equal(saved.enabled, false);
      assert.equal(saved.honeypotField, null);
      // The deployment's provider (hCaptcha by default) is named, and its widget is in the snippet.
      assert.match(await page.getByText(/^Require a captcha/).textContent() ?? "", /hCaptcha/);
      await page.getByRole("link", { name: "Snippet" }).click();
      const html = await page.locator("#snippet-html").textContent() ?? "";
      assert.match(html, /<div class="h-captcha" data-sitekey="YOUR_SITE_KEY"><\/div>/);
      assert.match(html, /https:\/\/js\.hcaptcha\.com\/1\/api\.js/);
      await page.getByRole("link", { name: "Settings" }).click();
      await page.getByRole("button", { name: "Delete form" }).waitFor();
    });

    await t.step("delete asks first, and deletes on confirmation", async () => {
      await page.getByRole("button", { name: "Delete form" }).click();
      const dialog = page.getByRole("dialog");
      assert.match(await dialog.textContent() ?? "", /cannot be undone/);
      await dialog.getByRole("button", { name: "Cancel" }).click();
      assert.equal((await (await h.admin("GET", "/forms")).json()).forms.length, 2);
      await page.getByRole("button", { name: "Delete form" }).click();
      await page.getByRole("dialog").getByRole("button", { name: "Delete form" }).click();
      await page.getByRole("heading", { name: "Forms" }).waitFor();
      assert.equal((await (await h.admin("GET", "/forms")).json()).forms.length, 1);
    });

    await t.step("key rotation shows the new key once; the old key stops working", async () => {
      await navLink("Tenant key").click();
      await page.getByRole("button", { name: "Rotate key" }).click();
      assert.match(await page.getByRole("dialog").textContent() ?? "", /stops working/);
      await page.getByRole("dialog").getByRole("button", { name: "Rotate key" }).click();
      const shown = page.getByLabel("New tenant key");
      await shown.waitFor();
      const newKey = await shown.inputValue();
      assert.match(newKey, /^sk_/);
      // In a font where I, l and 1 differ, and copied with a confirmation.
      assert.match(
        await page.evaluate<string>(
          `getComputedStyle(document.querySelector('[aria-label="New tenant key"]')).fontFamily`,
        ),
        /monospace/,
      );
      await page.getByRole("button", { name: "Copy key" }).click();
      await page.getByText("Copied").waitFor();
      assert.equal(await page.evaluate<string>("navigator.clipboard.readText()"), newKey);
      currentKey = newKey;
      await check("key-rotated");
      assert.equal((await h.admin("GET", "/forms")).status, 401);
      assert.equal((await h.admin("GET", "/forms", undefined, { tenantKey: newKey })).status, 200);
      // The console goes on with the new key.
      await navLink("Forms").click();
      await page.getByRole("link", { name: "Contact" }).waitFor();
    });

    await t.step(
      "at 1 280 px: headers and badges whole, no ring around the page, a favicon",
      async () => {
        await page.goto(`${api.origin}/#/forms/${formId}/deliveries`);
        await page.locator("tr[data-status]").first().waitFor();
        assert.deepEqual(await brokenWords(page), []);
        await page.reload();
        await page.locator("tr[data-status]").first().waitFor();
        const ring = await page.evaluate<string>(
          `document.activeElement === document.getElementById("main")
        ? getComputedStyle(document.activeElement).outlineStyle
        : "none"`,
        );
        assert.equal(ring, "none", "a focus outline around the whole page after a reload");
        const icon = await page.evaluate<string>(
          `document.querySelector("link[rel=icon]")?.href ?? ""`,
        );
        const favicon = await fetch(icon);
        assert.equal(favicon.status, 200);
        assert.equal(favicon.headers.get("content-type"), "image/svg+xml");
        await favicon.body?.cancel();
      },
    );

    await t.step("at phone width the views still fit", async () => {
      await page.setViewportSize({ width: 390, height: 844 });
      // Each view by its title (set when it is shown), then its content.
      const phoneViews = [
        ["#/forms", "Forms", "main h1"],
        [`#/forms/${formId}/settings`, "Settings", "form"],
        [`#/forms/${formId}/snippet`, "Snippet", "pre"],
        [`#/forms/${formId}/destinations`, "Destinations", "[data-destination]"],
        ["#/key", "Tenant key", "main h1"],
        [`#/forms/${formId}/deliveries`, "Deliveries", "tr[data-status]"],
      ];
      for (const [hash, title, ready] of phoneViews) {
        await page.goto(`${api.origin}/${hash}`);
        await waitFor(async () => (await page.title()).startsWith(`${title} ·`));
        await page.locator(ready).first().waitFor();
        const overflow = await page.evaluate<number>(
          "document.documentElement.scrollWidth - document.documentElement.clientWidth",
        );
        assert.ok(overflow <= 0, `${hash}: page wider than the screen by ${overflow}px`);
        assert.deepEqual(await brokenWords(page), [], `${hash}: a word broken inside`);
      }
      await check("phone-deliveries");
      await page.setViewportSize({ width: 1280, height: 800 });
    });

    await t.step(
      "a key rotated elsewhere signs the console out; sign-out forgets the key",
      async () => {
        const rotated = await h.admin("POST", "/keys/rotate", undefined, { tenantKey: currentKey });
        const { tenantKey } = await rotated.json();
        await navLink("Forms").click();
        await page.getByText("Signed out: Invalid tenant key").waitFor();
        assert.equal(await page.evaluate(() => sessionStorage.length), 0);
        await page.getByLabel("Tenant key").fill(tenantKey);
        await page.getByRole("button", { name: "Sign in" }).click();
        await page.getByRole("link", { name: "Contact" }).waitFor();
        await page.getByRole("button", { name: "Sign out" }).click();
        await page.getByLabel("Tenant key").waitFor();
        assert.equal(await page.evaluate(() => sessionStorage.length), 0);
        await page.goto(`${api.origin}/#/forms`);
        await page.getByLabel("Tenant key").waitFor();
        assert.equal(await page.getByRole("heading", { name: "Forms" }).count(), 0);
      },
    );

    await t.step("the API reference page renders the document from our own origin", async () => {
      await page.goto(`${api.origin}/v1/docs`);
      await page.getByText("/v1/admin/forms/{id}/destinations").first().waitFor();
      await screenshot(page, "console-api-reference.png");
    });

    assert.deepEqual(views, [
      "sign-in",
      "forms-empty",
      "form-new",
      "snippet",
      "destination-error",
      "destinations",
      "destination-smtp-error",
      "deliveries",
      "deliveries-health",
      "form-settings",
      "key-rotated",
      "phone-deliveries",
    ]);
    assert.ok(urls.every((url) => !url.includes("sk_")), "a URL carried the key");
    assert.ok(
      urls.every((url) => url.startsWith(api.origin) || url.startsWith("data:")),
      `outside requests: ${urls.filter((u) => !u.startsWith(api.origin))}`,
    );
    assert.deepEqual(problems, []);
    assert.ok(h.logs.every((line) => !line.includes("sk_")), "a log line carried a key");
  } finally {
    await context?.close();
    await browser?.close();
  }
});
