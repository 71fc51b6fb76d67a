/**
 * The SMTP connector against a real SMTP server (npm smtp-server) on loopback,
 * in plaintext, STARTTLS and implicit-TLS modes, with messages parsed back by
 * postal-mime.
 */
import assert from "node:assert/strict";
import { PostalMime } from "./deps.ts";
import { createSmtpConnector, type SmtpConfig, type SmtpRelayConfig } from "../connectors/smtp.ts";
import { DeliveryError, type DeliveryReceipt } from "../connectors/types.ts";
import type { PlatformSmtp } from "../config.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { testCertificates } from "./helpers/certs.ts";
import { freePort } from "../tools/ports.ts";
import { startSmtpServer, type TestSmtpServer } from "./helpers/smtp_server.ts";

const USERNAME = "relay-üser";
const PASSWORD = "pässwörd-✓";
const certs = await testCertificates();

function envelopeWith(overrides: Partial<SubmissionEnvelope> = {}): SubmissionEnvelope {
  return {
    submissionId: "6f1c2a10-0000-4000-8000-000000000001",
    formId: "form-1",
    formName: "Contact",
    payload: { name: "Ada", email: "ada@example.org", message: "Hello" },
    metadata: {
      origin: "https://site.example",
      ip: "203.0.113.7",
      userAgent: "test",
      referer: null,
      submittedAt: "2026-01-02T03:04:05.000Z",
    },
    ...overrides,
  };
}

function relayConfig(server: { port: number }, overrides: Partial<SmtpRelayConfig> = {}) {
  return {
    host: "localhost",
    port: server.port,
    secureTransport: "off",
    username: USERNAME,
    password: PASSWORD,
    from: "forms@tenant.example",
    to: ["owner@tenant.example"],
    subjectTemplate: "New submission: {{formName}}",
    ...overrides,
  } as SmtpRelayConfig;
}

function platformFor(server: TestSmtpServer, mode: PlatformSmtp["secureTransport"]): PlatformSmtp {
  return {
    host: "localhost",
    port: server.port,
    secureTransport: mode,
    username: USERNAME,
    password: PASSWORD,
    fromEmail: "notify@formrelay.example",
  };
}

function connectorFor(options: { platform?: PlatformSmtp | null; timeoutMs?: number } = {}) {
  return createSmtpConnector({
    platform: options.platform ?? null,
    heloName: "relay.formrelay.test",
    timeoutMs: options.timeoutMs ?? 10_000,
    caCerts: [certs.ca],
  });
}

/**
 * A test relay (plaintext unless `options.mode` says otherwise, the test credentials) and
 * a connector to it; `await using` closes both.
 */
async function relayWith(
  options: Partial<Parameters<typeof startSmtpServer>[0]> = {},
  connectorOptions: (server: TestSmtpServer) => Parameters<typeof connectorFor>[0] = () => ({}),
) {
  const server = await startSmtpServer({
    mode: "off",
    username: USERNAME,
    password: PASSWORD,
    ...options,
  });
  const connector = connectorFor(connectorOptions(server));
  return {
    server,
    connector,
    async [Symbol.asyncDispose]() {
      connector.close();
      await server.close();
    },
  };
}

function deliver(
  connector: ReturnType<typeof createSmtpConnector>,
  config: SmtpConfig,
  envelope = envelopeWith(),
  options: { destinationId?: string; signal?: AbortSignal } = {},
): Promise<DeliveryReceipt> {
  return connector.deliver({
    envelope,
    config,
    deliveryId: `${envelope.submissionId}:dest-1`,
    destinationId: options.destinationId ?? "dest-1",
    signal: options.signal ?? new AbortController().signal,
  });
}

async function deliveryError(promise: Promise<unknown>): Promise<DeliveryError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof DeliveryError, `expected a DeliveryError, got ${error}`);
    return error;
  }
  assert.fail("expected the delivery to fail");
}

function expectedPlainText(envelope: SubmissionEnvelope, replyTo?: string): string {
  const lines = [
    `Form: ${envelope.formName}`,
    `Submission ID: ${envelope.submissionId}`,
    `Submitted At: ${envelope.metadata.submittedAt}`,
    ...(replyTo ? [`Reply-To: ${replyTo}`] : []),
    `Origin: ${envelope.metadata.origin ?? "(none)"}`,
    `IP: ${envelope.metadata.ip ?? "(none)"}`,
    "Payload:",
    JSON.stringify(envelope.payload, null, 2),
  ];
  return lines.join("\n") + "\n";
}

function normalize(text: string | undefined): string {
  return (text ?? "").replace(/\r\n/g, "\n");
}

function headerNames(raw: string): string[] {
  const head = raw.slice(0, raw.indexOf("\r\n\r\n"));
  return head.split("\r\n").filter((l) => !/^[ \t]/.test(l)).map((l) =>
    l.slice(0, l.indexOf(":")).toLowerCase()
  );
}

function assertWireFormat(raw: string): void {
  assert.ok(!/\r(?!\n)|(?<!\r)\n/.test(raw), "bare CR or LF in the message");
  for (const line of raw.split("\r\n")) {
    assert.ok(new TextEncoder().encode(line).length <= 998, "line longer than 998 octets");
    assert.ok(/^[\x20-\x7e\t]*$/.test(line), `non-ASCII or control octet in line: ${line}`);
  }
}

for (const mode of ["off", "starttls", "on"] as const) {
  Deno.test(`SMTP Variant A delivers a text/plain message over ${mode} transport with AUTH LOGIN`, async () => {
    await using relay = await relayWith({ mode, certs });
    const { server, connector } = relay;
    const envelope = envelopeWith({ formName: "Contact – Zürich" });
    const config = relayConfig(server, {
      secureTransport: mode,
      to: ["owner@tenant.example", "team@tenant.example"],
      subjectTemplate: "{{formName}} #{{ submissionId }}",
    });
    const receipt = await deliver(connector, config, envelope);
    assert.deepEqual(receipt, { statusCode: 250 });

    assert.equal(server.messages.length, 1);
    const captured = server.messages[0];
    assert.equal(captured.secure, mode !== "off");
    assert.equal(captured.user, USERNAME);
    assert.equal(captured.heloName, "relay.formrelay.test");
    assert.equal(captured.from, "forms@tenant.example");
    assert.deepEqual(captured.to, ["owner@tenant.example", "team@tenant.example"]);
    assertWireFormat(captured.raw);

    const email = await PostalMime.parse(captured.raw);
    assert.equal(email.subject, `Contact – Zürich #${envelope.submissionId}`);
    assert.equal(email.from?.address, "forms@tenant.example");
    assert.deepEqual(email.to?.map((a) => a.address), [
      "owner@tenant.example",
      "team@tenant.example",
    ]);
    assert.match(email.messageId ?? "", /^<[0-9a-f]{32}@tenant\.example>$/);
    assert.match(email.date ?? "", /^2\d{3}-/);
    const headers = new Map(email.headers.map((h) => [h.key, h.value]));
    assert.match(
      headers.get("date") ?? "",
      /^\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} \+0000$/,
    );
    assert.equal(headers.get("mime-version"), "1.0");
    assert.equal(headers.get("content-type"), "text/plain; charset=UTF-8");
    // Reply answers the visitor (the payload's email); the body keeps the spec's lines.
    assert.deepEqual(email.replyTo, [{ name: "", address: "ada@example.org" }]);
    assert.equal(email.html, undefined);
    assert.equal(normalize(email.text), expectedPlainText(envelope));
  });
}

Deno.test("SMTP Variant B sends multipart/alternative through the platform relay with a stable Message-ID", async () => {
  await using relay = await relayWith(
    { mode: "starttls", certs },
    (server) => ({ platform: platformFor(server, "starttls") }),
  );
  const { server, connector } = relay;
  const envelope = envelopeWith({
    formName: 'Café <Kontakt> & "Co"',
    payload: { email: "ada@example.org", note: "<b>bold</b> & 'quotes'", n: [1, 2] },
  });
  const config: SmtpConfig = {
    to: ["inbox@customer.example"],
    subjectTemplate: "Form: {{formName}}",
  };
  await deliver(connector, config, envelope);
  await deliver(connector, config, envelope); // a retry of the same delivery
  await deliver(connector, config, envelope, { destinationId: "dest-2" });

  assert.equal(server.messages.length, 3);
  const [first, retry, other] = await Promise.all(
    server.messages.map((m) => PostalMime.parse(m.raw)),
  );
  const captured = server.messages[0];
  assert.equal(captured.from, "notify@formrelay.example");
  assert.deepEqual(captured.to, ["inbox@customer.example"]);
  assert.equal(captured.secure, true);
  assertWireFormat(captured.raw);

  assert.equal(first.messageId, retry.messageId);
  assert.notEqual(first.messageId, other.messageId);
  assert.match(first.messageId ?? "", /@formrelay\.example>$/);

  // The display name is formrelay's for the form, never the form's name (platformSenderName).
  assert.deepEqual(first.from, {
    name: "Form form1 via formrelay",
    address: "notify@formrelay.example",
  });
  assert.deepEqual(first.replyTo, [{ name: "", address: "ada@example.org" }]);
  assert.equal(first.subject, 'Form: Café <Kontakt> & "Co"');
  const headers = new Map(first.headers.map((h) => [h.key, h.value]));
  assert.equal(headers.get("x-formrelay-form-id"), "form-1");
  assert.equal(headers.get("x-formrelay-submission-id"), envelope.submissionId);
  assert.match(headers.get("content-type") ?? "", /^multipart\/alternative; boundary=/);

  assert.equal(normalize(first.text), expectedPlainText(envelope, "ada@example.org"));
  const html = first.html ?? "";
  assert.ok(html.includes("Café &lt;Kontakt&gt; &amp; &quot;Co&quot;"), html);
  assert.ok(html.includes("&lt;b&gt;bold&lt;/b&gt; &amp; &#39;quotes&#39;"), html);
  assert.ok(!html.includes("<b>bold"), "payload HTML must be escaped");
  assert.ok(html.includes("ada@example.org"));
});

Deno.test("SMTP Variant B leaves out Reply-To when the payload email is not a valid top-level address", async (t) => {
  await using relay = await relayWith({}, (server) => ({ platform: platformFor(server, "off") }));
  const { server, connector } = relay;
  const payloads: unknown[] = [
    { email: "not an address" },
    { contact: { email: "nested@example.org" } },
    [{ email: "array@example.org" }],
    "ada@example.org",
    { email: 42 },
  ];
  for (const [i, payload] of payloads.entries()) {
    await t.step(`payload ${JSON.stringify(payload)}`, async () => {
      await deliver(
        connector,
        { to: ["inbox@customer.example"], subjectTemplate: "x" },
        envelopeWith({ payload }),
      );
      const email = await PostalMime.parse(server.messages[i].raw);
      assert.equal(email.replyTo, undefined);
      assert.ok(!normalize(email.text).includes("Reply-To:"));
      assert.equal(normalize(email.text), expectedPlainText(envelopeWith({ payload })));
    });
  }
});

Deno.test("SMTP a wrong password is a permanent failure with code 535 and no secret in the message", async () => {
  await using relay = await relayWith({ mode: "starttls", certs });
  const { server, connector } = relay;
  const config = relayConfig(server, {
    secureTransport: "starttls",
    password: "wrong-secret-123",
  });
  const error = await deliveryError(deliver(connector, config));
  assert.equal(error.permanent, true);
  assert.equal(error.statusCode, 535);
  assert.equal(
    error.blame,
    "destination",
    "a relay refusing the login is broken for every submission",
  );
  assert.match(error.message, /^Cannot deliver to "localhost:\d+": 535 authentication failed/);
  assert.ok(!error.message.includes("wrong-secret-123"));
  assert.ok(!error.message.includes("Hello"), "payload must not appear in errors");
  assert.equal(server.logins.failed, 1);
  assert.equal(server.messages.length, 0);
});

Deno.test("SMTP a 450 recipient is a transient failure", async () => {
  await using relay = await relayWith({
    rejectRecipients: { "busy@tenant.example": 450 },
  });
  const { server, connector } = relay;
  const error = await deliveryError(
    deliver(connector, relayConfig(server, { to: ["busy@tenant.example"] })),
  );
  assert.equal(error.permanent, false);
  assert.equal(error.blame, "submission");
  assert.equal(error.statusCode, 450);
  assert.match(error.message, /all recipients rejected: busy@tenant\.example \(450\)/);
  assert.equal(server.messages.length, 0);
});

Deno.test("SMTP all recipients refused with 5xx is a permanent failure", async () => {
  await using relay = await relayWith({
    rejectRecipients: { "gone@tenant.example": 550, "nope@tenant.example": 553 },
  });
  const { server, connector } = relay;
  const config = relayConfig(server, { to: ["gone@tenant.example", "nope@tenant.example"] });
  const error = await deliveryError(deliver(connector, config));
  assert.equal(error.permanent, true);
  assert.equal(error.statusCode, 550);
  assert.equal(error.blame, "submission", "refused recipients are this message's fault");
  assert.equal(server.messages.length, 0);
});

Deno.test("SMTP partial recipient rejection still delivers to the others and names the rejected", async () => {
  await using relay = await relayWith({
    rejectRecipients: { "gone@tenant.example": 550, "busy@tenant.example": 450 },
  });
  const { server, connector } = relay;
  const config = relayConfig(server, {
    to: ["gone@tenant.example", "owner@tenant.example", "busy@tenant.example"],
  });
  const receipt = await deliver(connector, config);
  assert.equal(receipt.statusCode, 250);
  assert.equal(
    receipt.detail,
    "Rejected recipients: gone@tenant.example (550), busy@tenant.example (450)",
  );
  assert.equal(server.messages.length, 1);
  assert.deepEqual(server.messages[0].to, ["owner@tenant.example"]);
});

Deno.test("SMTP starttls mode refuses a server that does not offer STARTTLS, before AUTH", async () => {
  await using relay = await relayWith({ mode: "starttls", certs, hideStartTls: true });
  const { server, connector } = relay;
  const error = await deliveryError(
    deliver(connector, relayConfig(server, { secureTransport: "starttls" })),
  );
  assert.equal(error.permanent, true);
  assert.match(error.message, /server does not offer STARTTLS$/);
  assert.deepEqual(server.logins, { ok: 0, failed: 0 });
  assert.equal(server.messages.length, 0);
});

for (const mode of ["off", "starttls"] as const) {
  for (const offered of [["LOGIN"], ["PLAIN"], ["PLAIN", "LOGIN"]]) {
    const expected = offered.includes("LOGIN") ? "LOGIN" : "PLAIN";
    Deno.test(`SMTP logs in with AUTH ${expected} over ${mode} transport to a relay offering ${offered.join(" ")}`, async () => {
      await using relay = await relayWith({ mode, certs, authMethods: offered });
      const { server, connector } = relay;
      const receipt = await deliver(connector, relayConfig(server, { secureTransport: mode }));
      assert.equal(receipt.statusCode, 250);
      assert.deepEqual(server.authMethodsUsed, [expected]);
      assert.deepEqual(server.logins, { ok: 1, failed: 0 });
      assert.equal(server.messages[0].user, USERNAME);
    });
  }
}

Deno.test("SMTP AUTH PLAIN with a wrong password is a permanent authentication failure", async () => {
  await using relay = await relayWith({ authMethods: ["PLAIN"] });
  const { server, connector } = relay;
  const error = await deliveryError(deliver(connector, relayConfig(server, { password: "wrong" })));
  assert.equal(error.permanent, true);
  assert.equal(error.statusCode, 535);
  assert.match(error.message, /535 authentication failed/);
  assert.deepEqual(server.authMethodsUsed, ["PLAIN"]);
  assert.equal(server.messages.length, 0);
});

Deno.test("SMTP a relay offering neither AUTH LOGIN nor AUTH PLAIN is a permanent failure naming what it offers", async () => {
  await using relay = await relayWith({ authMethods: ["CRAM-MD5", "XOAUTH2"] });
  const { server, connector } = relay;
  const error = await deliveryError(deliver(connector, relayConfig(server)));
  assert.equal(error.permanent, true);
  assert.match(
    error.message,
    /server offers neither AUTH LOGIN nor AUTH PLAIN: it offers AUTH CRAM-MD5 XOAUTH2$/,
  );
  assert.deepEqual(server.authMethodsUsed, [], "no login attempted");
  assert.equal(server.messages.length, 0);
});

Deno.test("SMTP reads the AUTH mechanisms again after STARTTLS and uses what the upgraded session offers", async () => {
  await using relay = await relayWith({
    mode: "starttls",
    certs,
    authMethodsBeforeTls: ["LOGIN"],
    authMethods: ["PLAIN"],
  });
  const { server, connector } = relay;
  const probe = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  try {
    const beforeTls = await ehloReply(probe);
    assert.match(beforeTls, /^250[ -]AUTH LOGIN\r$/m, "before TLS the relay offers LOGIN only");
  } finally {
    probe.close();
  }
  const receipt = await deliver(connector, relayConfig(server, { secureTransport: "starttls" }));
  assert.equal(receipt.statusCode, 250);
  assert.deepEqual(server.authMethodsUsed, ["PLAIN"], "the mechanism offered after STARTTLS");
  assert.equal(server.messages[0].secure, true);
});

/** Reads the greeting, says EHLO and returns the whole EHLO reply (up to its last line). */
async function ehloReply(conn: Deno.Conn): Promise<string> {
  const decoder = new TextDecoder();
  const buf = new Uint8Array(4096);
  let text = "";
  const readUntil = async (done: RegExp) => {
    while (!done.test(text)) {
      const n = await conn.read(buf);
      if (n === null) throw new Error(`Connection closed after: ${text}`);
      text += decoder.decode(buf.subarray(0, n));
    }
  };
  await readUntil(/^220 .*\r\n/m);
  text = "";
  await conn.write(new TextEncoder().encode("EHLO probe.test\r\n"));
  await readUntil(/^250 .*\r\n/m);
  return text;
}

Deno.test("SMTP a server that stalls after the greeting ends the attempt with a transient time-out and a closed socket", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  const serverSide = (async () => {
    const conn = await listener.accept();
    await conn.write(new TextEncoder().encode("220 stalling.example ESMTP\r\n"));
    // Read until the client gives up: EOF shows the client closed its socket.
    const buf = new Uint8Array(1024);
    let received = "";
    for (;;) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      received += new TextDecoder().decode(buf.subarray(0, n));
    }
    conn.close();
    return received;
  })();
  const connector = createSmtpConnector({ platform: null, heloName: "relay.test", timeoutMs: 300 });
  try {
    const started = performance.now();
    const config = relayConfig({ port }, { host: "127.0.0.1" });
    const error = await deliveryError(
      connector.deliver({
        envelope: envelopeWith(),
        config,
        deliveryId: "d",
        destinationId: "dest",
        signal: new AbortController().signal,
      }),
    );
    const elapsed = performance.now() - started;
    assert.equal(error.permanent, false);
    assert.equal(error.statusCode, undefined);
    assert.match(
      error.message,
      /^Cannot deliver to "127\.0\.0\.1:\d+": .*waiting for the reply to EHLO/,
    );
    assert.ok(elapsed >= 250 && elapsed < 3000, `gave up after ${elapsed} ms`);
    assert.equal(await serverSide, "EHLO relay.test\r\n");
  } finally {
    connector.close();
    listener.close();
  }
});

Deno.test("SMTP an aborted delivery closes the socket and is transient", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  const controller = new AbortController();
  const serverSide = (async () => {
    const conn = await listener.accept();
    await conn.write(new TextEncoder().encode("220 slow.example ESMTP\r\n"));
    const buf = new Uint8Array(1024);
    // Abort once the client's EHLO arrives, then wait for the client's close.
    await conn.read(buf);
    controller.abort();
    const n = await conn.read(buf).catch(() => null);
    conn.close();
    return n;
  })();
  const connector = createSmtpConnector({
    platform: null,
    heloName: "relay.test",
    timeoutMs: 10_000,
  });
  try {
    const error = await deliveryError(
      connector.deliver({
        envelope: envelopeWith(),
        config: {
          host: "127.0.0.1",
          port,
          secureTransport: "off",
          username: "u",
          password: "p",
          from: "a@example.org",
          to: ["b@example.org"],
          subjectTemplate: "x",
        },
        deliveryId: "d",
        destinationId: "dest",
        signal: controller.signal,
      }),
    );
    assert.equal(error.permanent, false);
    assert.match(error.message, /delivery aborted$/);
    assert.equal(await serverSide, null);
  } finally {
    connector.close();
    listener.close();
  }
});

Deno.test("SMTP message content survives the wire: leading dots, a 5 000-character line, emoji subject", async () => {
  await using relay = await relayWith({ mode: "on", certs });
  const { server, connector } = relay;
  const payload = {
    dots: ".".repeat(300),
    long: "é" + "x".repeat(4998) + "\u{1F600}",
    lines: ".\n.hidden\r\n..",
    text: "héllo = wörld\t ",
  };
  const envelope = envelopeWith({ payload, formName: "Feedback 📬" });
  const config = relayConfig(server, {
    secureTransport: "on",
    subjectTemplate: "🎉 New {{formName}} 🎉 " + "ünïcødé ".repeat(20),
  });
  await deliver(connector, config, envelope);
  const captured = server.messages[0];
  assertWireFormat(captured.raw);
  // The server removed the dot-stuffing; lines starting with a dot were on the wire.
  assert.ok(captured.raw.split("\r\n").some((l) => l.startsWith(".")));
  const email = await PostalMime.parse(captured.raw);
  assert.equal(email.subject, "🎉 New Feedback 📬 🎉 " + "ünïcødé ".repeat(20));
  assert.equal(normalize(email.text), expectedPlainText(envelope));
  const sent = normalize(email.text);
  const json = JSON.parse(sent.slice(sent.indexOf("Payload:\n") + 9));
  assert.deepEqual(json, payload);
});

Deno.test("SMTP CR/LF in form name, subject template or payload email cannot inject a header", async () => {
  await using relay = await relayWith({}, (server) => ({ platform: platformFor(server, "off") }));
  const { server, connector } = relay;
  const envelope = envelopeWith({
    formName: "Contact\r\nBcc: victim1@evil.example",
    payload: { email: "ada@example.org\r\nBcc: victim2@evil.example" },
  });
  await deliver(connector, {
    to: ["inbox@customer.example"],
    subjectTemplate: "Hi\r\nBcc: victim3@evil.example\nX-Injected: yes {{formName}}",
  }, envelope);
  await deliver(
    connector,
    relayConfig(server, { subjectTemplate: "A\rBcc: victim4@evil.example {{formName}}" }),
    envelope,
  );
  assert.equal(server.messages.length, 2);
  for (const captured of server.messages) {
    assertWireFormat(captured.raw);
    const names = headerNames(captured.raw);
    assert.ok(!names.includes("bcc"), `headers: ${names}`);
    assert.ok(!names.includes("x-injected"), `headers: ${names}`);
    assert.equal(new Set(names).size, names.length, "a header appears twice");
    assert.ok(!captured.to.some((a) => a.includes("evil")));
    const email = await PostalMime.parse(captured.raw);
    assert.equal(email.bcc, undefined);
    assert.equal(email.replyTo, undefined);
  }
  const variantB = await PostalMime.parse(server.messages[0].raw);
  assert.equal(
    variantB.subject,
    "Hi Bcc: victim3@evil.example X-Injected: yes Contact Bcc: victim1@evil.example",
  );
  assert.equal(variantB.from?.name, "Form form1 via formrelay");
});

Deno.test("SMTP idle sessions are reused for the next message and ended by close()", async () => {
  await using relay = await relayWith({ mode: "starttls", certs });
  const { server, connector } = relay;
  const config = relayConfig(server, { secureTransport: "starttls" });
  for (let i = 0; i < 3; i++) await deliver(connector, config);
  assert.equal(server.messages.length, 3);
  assert.equal(server.connections, 1);
  assert.equal(server.logins.ok, 1);
  assert.equal(server.closedConnections, 0);
  connector.close();
  await server.waitForClosed(1);
});

Deno.test("SMTP a pooled session the server has dropped is replaced without a failure", async () => {
  await using relay = await relayWith({
    socketTimeoutMs: 200,
  });
  const { server, connector } = relay;
  const config = relayConfig(server);
  await deliver(connector, config);
  await server.waitForClosed(1); // the server's idle time-out hung up
  await deliver(connector, config);
  assert.equal(server.messages.length, 2);
  assert.equal(server.connections, 2);
});

Deno.test("SMTP the outbound guard runs before connecting and its error propagates", async () => {
  const server = await startSmtpServer({ mode: "off", username: USERNAME, password: PASSWORD });
  const checked: string[] = [];
  const connector = createSmtpConnector({
    platform: null,
    heloName: "relay.test",
    timeoutMs: 5000,
    guard: {
      allowAll: false,
      approve(hostname) {
        checked.push(hostname);
        return Promise.reject(
          new DeliveryError(`Cannot deliver to "${hostname}": blocked address`, {
            permanent: true,
          }),
        );
      },
    },
  });
  try {
    const error = await deliveryError(deliver(connector, relayConfig(server)));
    assert.equal(error.message, 'Cannot deliver to "localhost": blocked address');
    assert.equal(error.permanent, true);
    assert.deepEqual(checked, ["localhost"]);
    assert.equal(server.connections, 0);
  } finally {
    connector.close();
    await server.close();
  }
});

Deno.test("SMTP a Variant B config without a platform relay is a permanent failure", async () => {
  const connector = connectorFor({ platform: null });
  try {
    const error = await deliveryError(
      deliver(connector, { to: ["a@example.org"], subjectTemplate: "x" }),
    );
    assert.equal(error.permanent, true);
    assert.match(error.message, /platform relay is not configured/);
  } finally {
    connector.close();
  }
});

Deno.test("SMTP a refused connection is a transient failure", async () => {
  const port = freePort();
  const connector = connectorFor();
  try {
    const config = relayConfig({ port }, { host: "127.0.0.1" });
    const error = await deliveryError(deliver(connector, config));
    assert.equal(error.permanent, false);
    assert.equal(error.blame, "destination");
    assert.match(error.message, /^Cannot deliver to "127\.0\.0\.1:\d+": no SMTP service answered$/);
  } finally {
    connector.close();
  }
});

Deno.test("SMTP a closed port, a silent service and a service that is not SMTP fail with one text", async () => {
  const closed = freePort();
  const silent = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const http = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const serving = [
    (async () => {
      for await (const conn of silent) held.push(conn);
    })(),
    (async () => {
      for await (const conn of http) {
        await conn.write(new TextEncoder().encode("HTTP/1.1 400 Bad Request\r\n\r\n"));
        conn.close();
      }
    })(),
  ];
  const connector = connectorFor({ timeoutMs: 300 });
  try {
    const texts = [];
    for (const port of [closed, silent.addr.port, http.addr.port]) {
      const error = await deliveryError(
        deliver(connector, relayConfig({ port }, { host: "127.0.0.1" })),
      );
      texts.push(error.message.replace(/:\d+"/, ':PORT"'));
    }
    assert.deepEqual(
      texts,
      Array(3).fill('Cannot deliver to "127.0.0.1:PORT": no SMTP service answered'),
    );
  } finally {
    connector.close();
    silent.close();
    http.close();
    for (const conn of held) conn.close();
    await Promise.allSettled(serving);
  }
});

Deno.test("SMTP redact hides the relay password and leaves Variant B configs alone", () => {
  const connector = connectorFor();
  const relay = {
    host: "smtp.example.com",
    port: 587,
    secureTransport: "starttls",
    username: "u",
    password: "secret",
    from: "a@example.org",
    to: ["b@example.org"],
    subjectTemplate: "x",
  } satisfies SmtpRelayConfig;
  assert.deepEqual(connector.redact(relay), { ...relay, password: "********" });
  assert.equal(relay.password, "secret");
  const platform = { to: ["b@example.org"], subjectTemplate: "x" };
  assert.deepEqual(connector.redact(platform), platform);
  connector.close();
});

Deno.test("SMTP a relay's 451 is a refusal for rate, which its destination's pace holds and slows", async () => {
  await using relay = await relayWith({
    rejectRecipients: { "slow@tenant.example": 451 },
  });
  const { server, connector } = relay;
  const error = await deliveryError(
    deliver(connector, relayConfig(server, { to: ["slow@tenant.example"] })),
  );
  assert.equal(error.permanent, false);
  assert.equal(error.statusCode, 451);
  assert.deepEqual(error.pace, { limited: true }, "the destination's pace holds and slows");
});

/** Sends `count` messages, `atOnce` at a time; how many the relay refused with 421. */
async function sendMany(
  connector: ReturnType<typeof createSmtpConnector>,
  config: SmtpConfig,
  count: number,
  atOnce: number,
): Promise<number> {
  let next = 0;
  let refused = 0;
  await Promise.all(Array.from({ length: atOnce }, async () => {
    while (next < count) {
      next++;
      await deliver(connector, config).catch((error) => {
        if (error instanceof DeliveryError && error.statusCode === 421) refused++;
        else throw error;
      });
    }
  }));
  return refused;
}

Deno.test("SMTP sessions to a relay that keeps accepting grow past 8, up to 20", async () => {
  // Each message takes the relay a while, so more sessions at once are worth having.
  await using relay = await relayWith({ messageDelayMs: 20 });
  const { server, connector } = relay;
  const refused = await sendMany(connector, relayConfig(server), 400, 40);
  assert.equal(refused, 0);
  assert.equal(server.received, 400);
  assert.ok(server.maxOpen > 8, `at most ${server.maxOpen} sessions open at once`);
  assert.ok(server.maxOpen <= 20, `${server.maxOpen} sessions open at once`);
});

for (const mode of ["off", "starttls", "on"] as const) {
  Deno.test(`SMTP messages waiting for a session go behind others, each once, even behind one refused (${mode})`, async () => {
    // Each message takes the relay a while: messages wait for the relay's first five
    // sessions, which carry them behind their own; every third is refused at its final dot.
    await using relay = await relayWith({
      mode,
      certs,
      messageDelayMs: 20,
      refuseMessagesWith: "refuse-me",
    });
    const { server, connector } = relay;
    const config = relayConfig(server, { secureTransport: mode });
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => {
      const envelope = envelopeWith({
        submissionId: `6f1c2a10-0000-4000-8000-${String(i).padStart(12, "0")}`,
        payload: { message: i % 3 === 0 ? "refuse-me" : "keep" },
      });
      return deliver(connector, config, envelope).then(() => "sent", (error) => error);
    }));
    const refused = results.filter((result) => result !== "sent");
    assert.equal(refused.length, 10);
    for (const error of refused) {
      assert.ok(error instanceof DeliveryError && error.permanent && error.statusCode === 554);
    }
    const ids = server.messages.map((m) => /Submission ID: (\S+)/.exec(m.raw)?.[1]);
    assert.equal(ids.length, 20);
    assert.equal(new Set(ids).size, 20, "a message arrived twice");
    assert.ok(server.connections <= 20, `${server.connections} connections`);
  });
}

Deno.test("SMTP sessions to a relay that says 421 to more connections shrink below what it takes", async () => {
  await using relay = await relayWith({ messageDelayMs: 20, maxClients: 6 });
  const { server, connector } = relay;
  const count = 300;
  const refused = await sendMany(connector, relayConfig(server), count, 40);
  // Growing past 6 is tried now and then (one 421, then half as many sessions): a gate
  // that did not shrink would meet a 421 on most connections it opens past the sixth.
  assert.ok(refused >= 1, "the relay's limit was met");
  assert.ok(refused <= count / 20, `${refused} of ${count} refused`);
  assert.equal(server.received + refused, count);
});
