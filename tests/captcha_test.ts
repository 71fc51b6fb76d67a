import type { Config } from "../config.ts";
import assert from "node:assert/strict";
import { CAPTCHA_UNAVAILABLE_DETAIL } from "../ingest/captcha.ts";
import { expectError } from "./helpers/assert.ts";
import { startHarness } from "./helpers/harness.ts";
import { countKeys } from "./helpers/kv.ts";
import { freePort } from "../tools/ports.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const SECRET = "0x0000000000000000000000000000000000000000";

/** A local captcha verify endpoint that records what it receives and answers as told. */
function startVerifier(answer: () => Response | Promise<Response>) {
  const controller = new AbortController();
  const release = Promise.withResolvers<void>();
  const received: URLSearchParams[] = [];
  const contentTypes: string[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen() {} },
    async (request) => {
      contentTypes.push(request.headers.get("content-type") ?? "");
      received.push(new URLSearchParams(await request.text()));
      return await answer();
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/siteverify`,
    received,
    contentTypes,
    release: release.promise,
    async [Symbol.asyncDispose]() {
      release.resolve();
      controller.abort();
      await server.finished;
    },
  };
}

async function captchaForm(verifyUrl: string, overrides: Partial<Config> = {}) {
  const h = await startHarness({
    captchaVerifyUrl: verifyUrl,
    clientIpHeader: "x-forwarded-for",
    ...overrides,
  }, { deliver: false });
  const form = await h.createForm({ verifyCaptcha: true, captchaSecret: SECRET });
  await h.addDestination(form.id, {
    type: "webhook",
    config: { url: "https://hooks.example.com/in" },
  });
  return { h, form };
}

Deno.test("captcha: a token that verifies is accepted, the verify request is form-encoded", async () => {
  await using verifier = startVerifier(() => Response.json({ success: true }));
  const { h, form } = await captchaForm(verifier.url);
  await using _ = h;
  const response = await h.submit(form.publicKey, { a: 1 }, {
    "x-captcha-token": "token-123",
    "x-forwarded-for": "6.6.6.6, 203.0.113.5",
  });
  assert.equal(response.status, 202);
  assert.equal(verifier.received.length, 1);
  assert.match(verifier.contentTypes[0], /^application\/x-www-form-urlencoded/);
  const sent = verifier.received[0];
  assert.equal(sent.get("secret"), SECRET);
  assert.equal(sent.get("response"), "token-123");
  assert.equal(sent.get("remoteip"), "203.0.113.5");
});

Deno.test("captcha: a missing token is 400 Captcha token is required, without calling the provider", async () => {
  await using verifier = startVerifier(() => Response.json({ success: true }));
  const { h, form } = await captchaForm(verifier.url);
  await using _ = h;
  await expectError(await h.submit(form.publicKey, { a: 1 }), 400, "Captcha token is required");
  assert.equal(verifier.received.length, 0);
});

Deno.test("captcha: the provider's verdict against the token gives 400 Invalid captcha token", async (t) => {
  const answers: [string, () => Response][] = [
    [
      "success false",
      () => Response.json({ success: false, "error-codes": ["invalid-input-response"] }),
    ],
    ["success as a string", () => Response.json({ success: "true" })],
    ["201", () => Response.json({ success: true }, { status: 201 })],
    ["400", () => Response.json({ success: false }, { status: 400 })],
  ];
  for (const [name, answer] of answers) {
    await t.step(name, async () => {
      await using verifier = startVerifier(answer);
      const { h, form } = await captchaForm(verifier.url);
      await using _ = h;
      const response = await h.submit(form.publicKey, { a: 1 }, { "x-captcha-token": "t" });
      await expectError(response, 400, "Invalid captcha token");
      assert.equal(verifier.received.length, 1);
      const jobs = await countKeys(h.service.db.kv, "jobs");
      assert.equal(jobs, 0);
    });
  }
});

/**
 * Checks an answer for an unavailable provider: the contract's 400, with the detail and
 * Retry-After that ask the visitor to try again; nothing accepted; logged.
 */
async function expectUnavailable(
  h: Awaited<ReturnType<typeof captchaForm>>["h"],
  response: Response,
  reason: RegExp,
) {
  const body = await expectError(response, 400, "Invalid captcha token");
  assert.equal(body.detail, CAPTCHA_UNAVAILABLE_DETAIL);
  assert.equal(body.retryAfter, 30);
  assert.equal(response.headers.get("retry-after"), "30");
  assert.equal(await countKeys(h.service.db.kv, "jobs"), 0, "fails closed: nothing accepted");
  const line = h.logs.find((l) => l.includes("captcha provider unavailable"));
  assert.ok(line, h.logs.join("\n"));
  assert.match(line, reason);
  assert.ok(!line.includes(SECRET) && !line.includes('"t"'), "no secret or token in the log");
}

Deno.test("captcha: a provider answering 5xx, 429 or not its JSON is unavailable: 400 to try again, logged, counted apart", async (t) => {
  const answers: [string, () => Response, RegExp][] = [
    ["500", () => Response.json({ success: true }, { status: 500 }), /answered HTTP 500/],
    ["502", () => new Response("bad gateway", { status: 502 }), /answered HTTP 502/],
    ["429", () => new Response("slow down", { status: 429 }), /answered HTTP 429/],
    ["non-JSON", () => new Response("<html>oops</html>"), /other than its JSON/],
  ];
  for (const [name, answer, reason] of answers) {
    await t.step(name, async () => {
      await using verifier = startVerifier(answer);
      const { h, form } = await captchaForm(verifier.url);
      await using _ = h;
      const response = await h.submit(form.publicKey, { a: 1 }, { "x-captcha-token": "t" });
      await expectUnavailable(h, response, reason);
      const line = h.logs.find((l) => l.includes("captcha provider unavailable"))!;
      assert.match(line, new RegExp(form.id));
      assert.match(line, new RegExp(h.orgId));
      const { days } = await (await h.admin("GET", `/forms/${form.id}/refusals?days=1`)).json();
      assert.equal(days[0].captcha_unavailable, 1);
      assert.equal(days[0].captcha, 0, "not counted as a bad token");
      const metrics = await (await h.request("/metrics")).text();
      assert.match(
        metrics,
        /formrelay_submissions_refused_total\{status="400",reason="captcha_unavailable"\} [1-9]/,
      );
    });
  }
});

Deno.test("captcha: a provider that does not answer within 5 s is unavailable: 400 to try again", async () => {
  let release: Promise<void> = Promise.resolve();
  await using verifier = startVerifier(async () => {
    await release;
    return Response.json({ success: true });
  });
  release = verifier.release;
  const { h, form } = await captchaForm(verifier.url);
  await using _ = h;
  const started = Date.now();
  const response = await h.submit(form.publicKey, { a: 1 }, { "x-captcha-token": "t" });
  await expectUnavailable(h, response, /no answer in time/);
  const elapsed = Date.now() - started;
  assert.ok(elapsed >= 4900 && elapsed < 9000, `answered after ${elapsed} ms`);
});

Deno.test("captcha: an unreachable provider fails closed and asks the visitor to try again", async () => {
  const port = freePort();
  const { h, form } = await captchaForm(`http://127.0.0.1:${port}/siteverify`);
  await using _ = h;
  const response = await h.submit(form.publicKey, { a: 1 }, { "x-captcha-token": "t" });
  await expectUnavailable(h, response, /unreachable/);
  // A person posting the plain HTML form reads that it is not their doing.
  const page = await h.request(`/v1/f/${form.publicKey}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", accept: "text/html" },
    body: "a=1&h-captcha-response=t",
  });
  assert.equal(page.status, 400);
  assert.equal(page.headers.get("retry-after"), "30");
  assert.match(await page.text(), /Nothing you entered is wrong: please go back and try again/);
});

Deno.test("captcha: failed verifications count against the client, which then gets 429 without a call", async () => {
  await using verifier = startVerifier(() => Response.json({ success: false }));
  const { h, form } = await captchaForm(verifier.url, { rateLimit: { max: 3, windowMs: 60_000 } });
  await using _ = h;
  const from = (ip: string) => ({ "x-captcha-token": "bad", "x-forwarded-for": ip });
  for (let i = 0; i < 3; i++) {
    await expectError(
      await h.submit(form.publicKey, { i }, from("203.0.113.5")),
      400,
      "Invalid captcha token",
    );
  }
  assert.equal(verifier.received.length, 3);
  await expectError(
    await h.submit(form.publicKey, {}, from("203.0.113.5")),
    429,
    "Too many submissions",
  );
  assert.equal(verifier.received.length, 3, "the provider is not called past the limit");
  // Another client is not affected.
  await expectError(
    await h.submit(form.publicKey, {}, from("203.0.113.6")),
    400,
    "Invalid captcha token",
  );
  assert.equal(verifier.received.length, 4);
});

Deno.test("captcha: a plain HTML form's widget field is the token, and leaves the payload", async (t) => {
  for (const field of ["h-captcha-response", "cf-turnstile-response", "g-recaptcha-response"]) {
    await t.step(field, async () => {
      await using verifier = startVerifier(() => Response.json({ success: true }));
      await using sink = startWebhookSink();
      const h = await startHarness({ captchaVerifyUrl: verifier.url });
      await using _ = h;
      const form = await h.createForm({ verifyCaptcha: true, captchaSecret: SECRET });
      await h.addDestination(form.id, { type: "webhook", config: { url: sink.url } });
      const response = await h.request(`/v1/f/${form.publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ email: "a@example.com", [field]: "widget-token" }),
      });
      assert.equal(response.status, 202);
      assert.equal(verifier.received[0].get("response"), "widget-token");
      await waitFor(() => sink.received.length === 1, { timeoutMs: 5000 });
      assert.deepEqual(sink.received[0].json?.payload, { email: "a@example.com" });
    });
  }
});

Deno.test("captcha: the header wins over a widget field, and an empty field is no token", async () => {
  await using verifier = startVerifier(() => Response.json({ success: true }));
  const { h, form } = await captchaForm(verifier.url);
  await using _ = h;
  const both = await h.submit(form.publicKey, { "h-captcha-response": "from-body" }, {
    "x-captcha-token": "from-header",
  });
  assert.equal(both.status, 202);
  assert.equal(verifier.received[0].get("response"), "from-header");
  await expectError(
    await h.submit(form.publicKey, { "cf-turnstile-response": "" }),
    400,
    "Captcha token is required",
  );
  assert.equal(verifier.received.length, 1);
});

Deno.test("GET /v1/admin/deployment names the captcha provider and whether the platform relay exists", async (t) => {
  const cases: [string, string, string][] = [
    ["https://api.hcaptcha.com/siteverify", "hcaptcha", "hCaptcha"],
    [
      "https://challenges.cloudflare.com/turnstile/v0/siteverify",
      "turnstile",
      "Cloudflare Turnstile",
    ],
    ["https://www.google.com/recaptcha/api/siteverify", "recaptcha", "Google reCAPTCHA"],
    ["http://127.0.0.1:9/verify", "other", "The captcha service at 127.0.0.1"],
  ];
  for (const [url, id, name] of cases) {
    await t.step(id, async () => {
      await using h = await startHarness({ captchaVerifyUrl: url }, { deliver: false });
      const response = await h.admin("GET", "/deployment");
      assert.equal(response.status, 200);
      const body = await response.json();
      assert.equal(body.captcha.id, id);
      assert.equal(body.captcha.name, name);
      assert.equal(body.platformRelay, false);
    });
  }
  await t.step("with PLATFORM_SMTP_* set, the platform relay is offered", async () => {
    const platformSmtp = {
      host: "smtp.example.com",
      port: 587,
      secureTransport: "starttls" as const,
      username: "u",
      password: "p",
      fromEmail: "forms@example.com",
    };
    await using h = await startHarness({ platformSmtp }, { deliver: false });
    const body = await (await h.admin("GET", "/deployment")).json();
    assert.equal(body.platformRelay, true);
    assert.equal(JSON.stringify(body).includes("smtp.example.com"), false, "no relay detail");
  });
});
