/**
 * The commonest mistake made visible, in a real Chromium: a page on a site missing from
 * the form's allowed origins posts with fetch and is refused at the CORS preflight; the
 * Deliveries tab counts it as a wrong website, names the site, and allows it in one click.
 */
import assert from "node:assert/strict";
import { AxeBuilder } from "./deps.ts";
import { openConsole } from "./helpers/chromium.ts";
import { startHarness } from "./helpers/harness.ts";
import { serveApp } from "./helpers/serve.ts";

const BROWSER_MS = 15_000;
/** The pictures of docs/console.md, taken as the test goes. */
const PICTURES = new URL("../docs/screenshots/", import.meta.url);

Deno.test("console: a site refused at the preflight is named on the Deliveries tab and allowed in one click", async () => {
  await using h = await startHarness({}, { deliver: false });
  await using api = serveApp(h.service.app);
  const form = await h.createForm({ allowedOrigins: ["https://site.example"] });
  const preflight = (origin: string) =>
    h.request(`/v1/f/${form.publicKey}`, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "POST" },
    });
  const refused = await preflight("https://blog.example");
  assert.equal(refused.status, 403);
  await refused.body?.cancel();

  await using chromium = await openConsole({
    origin: api.origin,
    tenantKey: h.tenantKey,
    timeoutMs: BROWSER_MS,
  });
  const { page, problems } = chromium;
  await page.getByRole("link", { name: "Contact" }).click();
  await page.getByRole("link", { name: "Deliveries" }).click();
  const region = page.getByRole("region", { name: "Not delivered" });
  const row = region.locator('tr[data-reason="origin"]');
  await row.waitFor();
  assert.match(await row.textContent() ?? "", /^Wrong website11/);
  const site = region.locator('li[data-origin="https://blog.example"]');
  await site.waitFor();
  assert.match(await region.textContent() ?? "", /Sites refused as a wrong website/);
  await region.screenshot({ path: new URL("console-refused-origins.png", PICTURES).pathname });
  const violations = (await new AxeBuilder({ page }).analyze()).violations
    .filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => v.id);
  assert.deepEqual(violations, []);

  await site.getByRole("button", { name: "Allow this site" }).click();
  await page.getByText("https://blog.example is now an allowed origin").waitFor();
  const saved = (await (await h.admin("GET", `/forms/${form.id}`)).json()).form;
  assert.deepEqual(saved.allowedOrigins, ["https://site.example", "https://blog.example"]);
  await site.waitFor({ state: "detached" });
  const allowed = await preflight("https://blog.example");
  assert.equal(allowed.status, 204, "the site's fetch now passes its preflight");
  assert.deepEqual(problems, []);
});
