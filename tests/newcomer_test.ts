/**
 * A new user's first minutes, as one journey that follows the README's own commands: the
 * receiver and `task dev` of "A first submission", its curl steps (each value taken from
 * the answer before), then the console in Chromium: a form with a captcha, a webhook to a
 * local receiver and email to a local SMTP server, the example page submitted (fetch and
 * plain form), both delivered; the receiver fails, is paused, one held delivery is
 * redelivered, the destination resumed, the one waiting for its retry sent now. The
 * service's log stays JSON throughout.
 */
import assert from "node:assert/strict";
import type { Browser, Page } from "./deps.ts";
import { launchChromium } from "./helpers/chromium.ts";
import { serveExamples } from "./helpers/examples.ts";
import { switchableSink } from "./helpers/deliveries.ts";
import { startSmtpServer } from "./helpers/smtp_server.ts";
import { waitFor } from "./helpers/wait.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const BROWSER_MS = 15_000;
/** How the README runs Deno: the test's `npx` shell function runs this Deno instead. */
const NPX_DENO = "npx -y deno@2.9.6";

/** The fenced `sh` blocks of the README's "A first submission" section. */
function quickStartBlocks(readme: string): string[] {
  const section = readme.slice(readme.indexOf("## A first submission"));
  const end = section.indexOf("\n## ", 3);
  return [...(end === -1 ? section : section.slice(0, end)).matchAll(/```sh\n([\s\S]*?)```/g)]
    .map((m) => m[1]);
}

/** The ports of the README's service (8000) and receiver (9000) in this run; 0: any. */
interface Ports {
  service: number;
  receiver: number;
}

/** Lines of a child's stream, collected as they come. */
function collectLines(stream: ReadableStream<Uint8Array>, lines: string[]): Promise<void> {
  return (async () => {
    let buffer = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      buffer += chunk;
      const parts = buffer.split("\n");
      buffer = parts.pop()!;
      lines.push(...parts);
    }
    if (buffer !== "") lines.push(buffer);
  })();
}

/**
 * Runs shell text as the README's reader would, with `npx -y deno@2.9.6 …` running this
 * Deno and the README's ports (8000, 9000) replaced by those the processes took (port 0
 * given: a port picked in advance may be taken by another process before it is used).
 */
function shell(script: string, ports: Ports, env = {}) {
  const text = script.replaceAll("localhost:8000", `localhost:${ports.service}`)
    .replaceAll("port: 9000", `port: ${ports.receiver}`)
    .replaceAll("localhost:9000", `localhost:${ports.receiver}`);
  const prelude = `npx() { shift 2; "${Deno.execPath()}" "$@"; }\n`;
  return new Deno.Command("bash", {
    args: ["-c", prelude + text],
    cwd: ROOT,
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  });
}

/** Submits the example page's fetch form and waits for its success message. */
async function submitByFetch(site: Page, message: string) {
  await site.fill("#fetch-name", "Ada Lovelace");
  await site.fill("#fetch-email", "ada@example.com");
  await site.fill("#fetch-message", message);
  await site.click("#fetch-form button[type=submit]");
  await site.waitForSelector(`#fetch-status[data-state=success]`);
  await site.fill("#fetch-message", "");
}

/** Opens the example page as a visitor; its forms get what a captcha widget adds. */
async function openAsVisitor(site: Page, url: string) {
  await site.goto(url);
  // What a captcha widget does: a hidden field holding its token, in each form.
  await site.evaluate(`for (const form of document.forms) {
    const token = document.createElement("input");
    token.type = "hidden";
    token.name = "h-captcha-response";
    token.value = "widget-token";
    form.append(token);
  }`);
}

/**
 * Presses the console's Refresh until `ready` holds (the list does not poll by itself).
 * The console is brought to the front first: in a background tab Chromium throttles
 * animation frames, and each click waited 1–4 s for the button to be "stable".
 */
async function refreshUntil(page: Page, ready: () => Promise<boolean>, message: string) {
  await page.bringToFront();
  await waitFor(async () => {
    await page.getByRole("button", { name: "Refresh" }).click();
    return await ready();
  }, { message, timeoutMs: 30_000 });
}

Deno.test("a newcomer's journey: the README's commands, the console, the example page, a failing receiver", async (t) => {
  const readme = await Deno.readTextFile(new URL("README.md", `file://${ROOT}`));
  assert.ok(readme.includes(`${NPX_DENO} task dev`), "the README's Start names task dev");
  const [, servers, steps] = quickStartBlocks(readme);
  const receiverLine = servers.split("\n").find((line) => line.includes("Deno.serve"))!;
  const serviceLine = servers.split("\n").find((line) => line.includes("task dev"))!;
  assert.ok(receiverLine && serviceLine, servers);

  const dir = await Deno.makeTempDir({ prefix: "formrelay-newcomer-" });
  const ports: Ports = { service: 0, receiver: 0 };
  // The captcha provider is a local fake: it accepts one token, as a widget would give it.
  const verifier = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (request) => {
      const sent = new URLSearchParams(await request.text());
      return Response.json({ success: sent.get("response") === "widget-token" });
    },
  );
  const env = {
    KV_PATH: `${dir}/formrelay.kv`,
    PORT: String(ports.service),
    CAPTCHA_VERIFY_URL: `http://127.0.0.1:${verifier.addr.port}/siteverify`,
    // A failing receiver: its retries an hour apart (sent now by hand), paused after 0.36 s.
    RETRY_SCHEDULE_SECONDS: "3600,3600",
    DESTINATION_PAUSE_AFTER_HOURS: "0.0001",
  };
  // exec: the signals at the end reach Deno itself, not a shell around it.
  const exec = (line: string) => `exec ${line.replace(NPX_DENO, `"${Deno.execPath()}"`)}`;
  const receiver = shell(exec(receiverLine), ports).spawn();
  // Its deliveries on stdout, Deno.serve's "Listening on …" on stderr: both read.
  const receiverOut: string[] = [];
  const receiverDone = Promise.all([
    collectLines(receiver.stdout, receiverOut),
    collectLines(receiver.stderr, receiverOut),
  ]);
  const service = shell(exec(serviceLine), ports, env).spawn();
  const serviceOut: string[] = [];
  const serviceErr: string[] = [];
  const serviceDone = Promise.all([
    collectLines(service.stdout, serviceOut),
    collectLines(service.stderr, serviceErr),
  ]);
  let origin = "";
  const { sink, state } = switchableSink(500);
  state.failing = false;
  const smtp = await startSmtpServer({ mode: "off" });
  await using pages = await serveExamples();
  let browser: Browser | null = null;
  const shown: Page[] = [];
  try {
    await waitFor(() => serviceOut.some((line) => line.includes('"msg":"listening"')), {
      timeoutMs: 30_000,
      message: () => [...serviceOut, ...serviceErr].join("\n"),
    });
    origin = JSON.parse(serviceOut.find((line) => line.includes('"msg":"listening"'))!).url;
    ports.service = Number(new URL(origin).port);
    // The receiver says where it listens ("Listening on http://0.0.0.0:…/").
    await waitFor(() => receiverOut.some((line) => /Listening on .*:\d+/.test(line)), {
      message: () => receiverOut.join("\n"),
    });
    ports.receiver = Number(receiverOut.join("\n").match(/Listening on \S*:(\d+)/)![1]);

    let tenantKey = "";
    await t.step(
      "the README's curl steps run as written, each value from the answer before",
      async () => {
        const lines = steps.trimEnd().split("\n");
        // The last command asks for the delivery's status: run until the delivery is done.
        const check = lines.slice(lines.findLastIndex((l) => l.startsWith("curl"))).join("\n");
        const before = lines.slice(0, lines.length - check.split("\n").length).join("\n");
        const run = await shell(
          `set -e\n${before}\necho\necho "KEY=$KEY"\necho "CHECK_FORM=$FORM_ID"`,
          ports,
          env,
        )
          .output();
        const out = new TextDecoder().decode(run.stdout);
        assert.equal(run.code, 0, new TextDecoder().decode(run.stderr));
        assert.match(out, /\{"ok":true,"submissionId":"[0-9a-f-]{36}"\}/);
        const submissionId = out.match(/"submissionId":"([0-9a-f-]{36})"/)![1];
        tenantKey = out.match(/^KEY=(sk_\S+)$/m)![1];
        const formId = out.match(/^CHECK_FORM=(\S+)$/m)![1];
        let status = "";
        await waitFor(async () => {
          const answer = await shell(`KEY=${tenantKey}\nFORM_ID=${formId}\n${check}`, ports)
            .output();
          status = new TextDecoder().decode(answer.stdout).trim();
          return status === "delivered";
        }, { timeoutMs: 15_000, message: () => `status: ${status}` });
        await waitFor(() => receiverOut.some((line) => line.includes(submissionId)), {
          message: "the README's receiver printed the envelope",
        });
      },
    );

    browser = await launchChromium(BROWSER_MS);
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(BROWSER_MS);
    const page = await context.newPage();
    shown.push(page);
    let publicKey = "";

    await t.step("sign in and create a form with a captcha", async () => {
      await page.goto(`${origin}/`);
      await page.getByLabel("Tenant key").fill(tenantKey);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("link", { name: "New form" }).click();
      await page.getByLabel("Name").fill("Website");
      await page.getByLabel(/^Require a captcha \(The captcha service at 127\.0\.0\.1\)/).check();
      await page.getByLabel("Captcha secret").fill("captcha-secret");
      await page.getByRole("button", { name: "Create form" }).click();
      await page.getByRole("heading", { name: "HTML form" }).waitFor();
      const html = await page.locator("#snippet-html").textContent() ?? "";
      publicKey = html.match(/\/v1\/f\/(pk_[A-Za-z0-9_-]+)/)![1];
      assert.match(html, /This form requires a captcha: put your captcha widget here/);
      await page.getByText("Submissions to this form go nowhere yet").waitFor();
    });

    await t.step("a webhook to a local receiver and email to a local SMTP server", async () => {
      await page.getByRole("link", { name: "Destinations" }).click();
      await page.getByRole("button", { name: "Add…" }).click();
      await page.getByLabel("URL", { exact: true }).fill(sink.url);
      await page.getByRole("button", { name: "Add destination" }).click();
      await page.locator("[data-destination]").waitFor();
      await page.getByLabel("Add a destination").selectOption("smtp_relay");
      await page.getByRole("button", { name: "Add…" }).click();
      await page.getByLabel("SMTP host").fill("127.0.0.1");
      await page.getByLabel("Port", { exact: true }).fill(String(smtp.port));
      await page.getByLabel("Secure transport").selectOption("off");
      await page.getByLabel("Username").fill("relay-user");
      await page.getByLabel("Password").fill("relay-pässword");
      await page.getByLabel("From address").fill("forms@example.com");
      await page.getByLabel("Recipients").fill("owner@example.com");
      await page.getByRole("button", { name: "Add destination" }).click();
      await page.locator("[data-destination]").nth(1).waitFor();
    });

    const site = await context.newPage();
    shown.push(site);
    const examplePage = () =>
      `http://localhost:${pages.port}/contact.html?endpoint=${
        encodeURIComponent(origin)
      }&key=${publicKey}`;

    await t.step("the example page submits, plain form and fetch, and both arrive", async () => {
      await openAsVisitor(site, examplePage());
      await submitByFetch(site, "Hello by fetch");
      await site.fill("#plain-name", "Grace Hopper");
      await site.fill("#plain-email", "grace@example.com");
      await site.fill("#plain-message", "Hello by form");
      await site.click("#plain-form button[type=submit]");
      await site.getByRole("heading", { name: "Thank you" }).waitFor();

      await waitFor(() => sink.received.length === 2 && smtp.messages.length === 2, {
        message: () => `webhook ${sink.received.length}, email ${smtp.messages.length}`,
      });
      const payloads = sink.received.map((r) => r.json?.payload as Record<string, string>);
      assert.deepEqual(payloads.map((p) => p.message).sort(), ["Hello by fetch", "Hello by form"]);
      assert.ok(payloads.every((p) => !("h-captcha-response" in p)), "the token left the payload");
      assert.ok(
        smtp.messages.some((m) => /^Reply-To: grace@example\.com\r$/m.test(m.raw)),
        "Reply answers the visitor",
      );
      await page.getByRole("link", { name: "Deliveries" }).click();
      await waitFor(async () => (await page.locator('tr[data-status="delivered"]').count()) === 4);
    });

    await t.step("the receiver fails: send now, paused, redeliver one, resume", async () => {
      state.failing = true;
      await openAsVisitor(site, examplePage());
      await submitByFetch(site, "While the receiver fails");
      const retrying = page.locator('tr[data-status="retrying"]');
      await refreshUntil(page, async () => await retrying.count() === 1, "waiting for a retry");
      // Failing for longer than DESTINATION_PAUSE_AFTER_HOURS (0.36 s here) pauses it. The
      // failure's start is written just after its outcome shows, so the span counts from
      // here, not from the submission: on a busy machine the first attempt may come late.
      const failureSeenAt = Date.now();
      await waitFor(() => Date.now() - failureSeenAt > 1_000);
      await retrying.getByRole("button", { name: "Send now" }).click();
      // The console waits for the attempt and says how it ended (it failed again).
      await page.getByText(/^Sent now\. The attempt failed/).waitFor();
      const alert = page.getByRole("region", { name: "Destinations needing attention" });
      await refreshUntil(page, async () => await alert.count() === 1, "the webhook paused");

      // While paused, a new submission is held; the receiver is fixed, and that one is
      // redelivered by hand (a probe) before the destination is resumed.
      await submitByFetch(site, "While paused");
      const held = page.locator('tr[data-status="held"]');
      await refreshUntil(page, async () => await held.count() === 1, "held");
      state.failing = false;
      await held.getByRole("button", { name: "Redeliver" }).click();
      await page.getByText("Redelivery started.").waitFor();
      await waitFor(() =>
        sink.received.some((r) =>
          r.json?.payload && JSON.stringify(r.json.payload).includes("While paused")
        )
      );

      await page.getByRole("link", { name: "Destinations" }).click();
      const webhook = page.locator("[data-destination]").filter({ hasText: "Webhook" });
      await webhook.getByText("Paused", { exact: true }).waitFor();
      await webhook.getByRole("button", { name: "Resume" }).click();
      await webhook.getByText("Enabled", { exact: true }).waitFor();

      // The delivery that waited an hour for its retry goes with the resume, unasked.
      await page.getByRole("link", { name: "Deliveries" }).click();
      await waitFor(() =>
        sink.received.some((r) =>
          JSON.stringify(r.json?.payload).includes("While the receiver fails")
        )
      );
      const delivered = page.locator('tr[data-status="delivered"]');
      await refreshUntil(page, async () => await delivered.count() === 8, "all delivered");

      // Redelivery since a time, per destination: nothing is held or kept any more, and
      // the card says why.
      await page.getByRole("link", { name: "Destinations" }).click();
      await webhook.getByRole("button", { name: "Redeliver since" }).click();
      await webhook.getByText(
        /^Redelivery since .*: 0 redelivered\. Delivered submissions are not kept, so there was nothing to send again\.$/,
      ).waitFor();
    });

    await t.step("the log is JSON only", () => {
      assert.ok(serviceOut.length > 10);
      for (const line of serviceOut) assert.doesNotThrow(() => JSON.parse(line), line);
      assert.ok(!serviceErr.some((line) => line.includes("request.signal")), serviceErr.join("\n"));
    });
    // What the pages showed at the end (or at a failure), for a person to look at.
    await Deno.mkdir(new URL("./artifacts/", import.meta.url), { recursive: true });
    for (const [i, open] of shown.entries()) {
      await open.screenshot({
        path: new URL(`./artifacts/newcomer-${i + 1}.png`, import.meta.url).pathname,
        fullPage: true,
      }).catch((error) => console.error("screenshot", error));
    }
    await context.close();
  } finally {
    await browser?.close();
    try {
      service.kill("SIGTERM");
    } catch { /* gone */ }
    try {
      receiver.kill("SIGTERM");
    } catch { /* gone */ }
    await Promise.all([service.status, receiver.status, serviceDone, receiverDone]);
    await sink.close();
    await smtp.close();
    await verifier.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
});
