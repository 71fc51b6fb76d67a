import assert from "node:assert/strict";
import { PostalMime } from "../../tests/deps.ts";
import type { SubmissionEnvelope } from "../../submission.ts";
import {
  buildMessage,
  encodeHeaderText,
  encodePhrase,
  encodeQuotedPrintable,
  escapeHtml,
  formatDate,
  MAX_SUBJECT_CHARS,
  renderSubject,
  replyToAddress,
  stableMessageId,
} from "./message.ts";

const envelope: SubmissionEnvelope = {
  submissionId: "0b8f4a2e-1111-4222-8333-444455556666",
  formId: "form-9",
  formName: "Newsletter",
  payload: { email: "reader@example.org", tags: ["a", "b"] },
  metadata: {
    origin: null,
    ip: null,
    userAgent: null,
    referer: null,
    submittedAt: "2026-03-04T05:06:07.000Z",
  },
};

function decodeQuotedPrintable(text: string): string {
  const joined = text.replace(/=\r\n/g, "");
  const bytes: number[] = [];
  for (let i = 0; i < joined.length; i++) {
    if (joined[i] === "=") {
      bytes.push(parseInt(joined.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(joined.charCodeAt(i));
  }
  return new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array(bytes));
}

Deno.test("formatDate writes RFC 5322 dates in UTC with a numeric zone", () => {
  assert.equal(formatDate(new Date("2026-03-04T05:06:07Z")), "Wed, 04 Mar 2026 05:06:07 +0000");
  assert.equal(formatDate(new Date("1999-12-31T23:59:59Z")), "Fri, 31 Dec 1999 23:59:59 +0000");
});

Deno.test("renderSubject fills the placeholders, values on one line, and leaves other text alone", () => {
  assert.equal(
    renderSubject("{{formName}} / {{ submissionId }} / $& $1", envelope),
    `Newsletter / ${envelope.submissionId} / $& $1`,
  );
  assert.equal(
    renderSubject("{{fields.name}}{{fields.missing}} at {{submittedAt}}", {
      ...envelope,
      payload: { name: "Ada\r\nBcc: x@evil.example" },
    }),
    `Ada Bcc: x@evil.example at ${envelope.metadata.submittedAt}`,
  );
  assert.equal(
    renderSubject("{{formName}}", { ...envelope, formName: "$' and $`" }),
    "$' and $`",
  );
});

Deno.test("stableMessageId is the same for one submission and destination, and differs otherwise", () => {
  const a = stableMessageId("s1", "d1", "example.org");
  assert.equal(a, stableMessageId("s1", "d1", "example.org"));
  assert.notEqual(a, stableMessageId("s1", "d2", "example.org"));
  assert.notEqual(a, stableMessageId("s2", "d1", "example.org"));
  assert.match(a, /^<[0-9a-f]{32}@example\.org>$/);
});

Deno.test("replyToAddress accepts only a valid top-level email string", () => {
  assert.equal(replyToAddress({ email: " ada@example.org " }), "ada@example.org");
  assert.equal(replyToAddress({ email: "ada@example.org\r\nBcc: x@evil.example" }), null);
  assert.equal(replyToAddress({ email: "ada @example.org" }), null);
  assert.equal(replyToAddress({ email: "no-at-sign" }), null);
  assert.equal(replyToAddress({ email: ["ada@example.org"] }), null);
  assert.equal(replyToAddress([{ email: "ada@example.org" }]), null);
  assert.equal(replyToAddress(null), null);
  assert.equal(replyToAddress("ada@example.org"), null);
});

Deno.test("encodeQuotedPrintable keeps lines within 76 characters and round-trips UTF-8", () => {
  const samples = [
    "plain line",
    "a = b",
    "trailing space ",
    "trailing tab\t",
    "x".repeat(5000),
    "é".repeat(300),
    "😀".repeat(100) + "x",
    ".leading dot",
    "",
    "ß" + "=".repeat(100),
  ];
  for (const sample of samples) {
    const encoded = encodeQuotedPrintable(sample);
    for (const line of encoded.split("\r\n")) {
      assert.ok(line.length <= 76, `line of ${line.length}: ${line}`);
      assert.ok(/^[\x21-\x7e \t]*$/.test(line));
      assert.ok(!/[ \t]$/.test(line), "trailing whitespace would be lost in transit");
    }
    assert.equal(decodeQuotedPrintable(encoded), sample);
  }
  assert.equal(encodeQuotedPrintable("a\nb\r\nc\rd"), "a\r\nb\r\nc\r\nd");
});

Deno.test("encodeHeaderText turns line breaks into spaces and non-ASCII into encoded-words", () => {
  assert.equal(encodeHeaderText("Hello\r\nBcc: x@evil.example"), "Hello Bcc: x@evil.example");
  assert.equal(encodeHeaderText("plain text"), "plain text");
  const encoded = encodeHeaderText("Grüße 🎉".repeat(10));
  const words = encoded.split("\r\n ");
  assert.ok(words.length > 1, "long text is folded");
  for (const word of words) {
    assert.ok(word.length <= 75);
    const match = /^=\?UTF-8\?B\?([A-Za-z0-9+/=]+)\?=$/.exec(word);
    assert.ok(match, word);
    // Every word holds whole characters: it decodes on its own.
    new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.fromBase64(match[1]));
  }
  // Text that looks like an encoded-word is encoded, so it reads back literally.
  assert.match(encodeHeaderText("=?UTF-8?B?SGk=?="), /^=\?UTF-8\?B\?/);
});

Deno.test("encodePhrase quotes ASCII display names and encodes the rest", () => {
  assert.equal(encodePhrase('Say "hi" \\ <x@y.z>'), '"Say \\"hi\\" \\\\ <x@y.z>"');
  assert.equal(encodePhrase("Line\nbreak"), '"Line break"');
  assert.match(encodePhrase("Café"), /^=\?UTF-8\?B\?Q2Fmw6k=\?=$/);
});

Deno.test("escapeHtml escapes the five significant characters", () => {
  assert.equal(
    escapeHtml(`<a href="x">'&'</a>`),
    "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;",
  );
});

Deno.test("buildMessage Variant A is text/plain with the labelled lines, CRLF only, no header from input", async () => {
  const message = buildMessage(
    { ...envelope, formName: "Form\r\nBcc: x@evil.example" },
    {
      layout: "plain",
      from: "forms@tenant.example",
      to: ["a@tenant.example", "b@tenant.example"],
      subjectTemplate: "New: {{formName}}",
      destinationId: "dest",
      date: new Date("2026-03-04T05:06:07Z"),
    },
  );
  assert.equal(message.from, "forms@tenant.example");
  assert.deepEqual(message.recipients, ["a@tenant.example", "b@tenant.example"]);
  assert.ok(!/\r(?!\n)|(?<!\r)\n/.test(message.data));
  const head = message.data.slice(0, message.data.indexOf("\r\n\r\n"));
  assert.ok(head.startsWith("Date: Wed, 04 Mar 2026 05:06:07 +0000\r\nMessage-ID: <"));
  assert.ok(!/^Bcc:/im.test(head));
  assert.ok(!/^X-Formrelay-/im.test(head), "Variant A carries no Variant B metadata headers");
  assert.match(head, /^Reply-To: reader@example\.org\r$/m, "Reply answers the visitor");
  const email = await PostalMime.parse(message.data);
  assert.equal(email.subject, "New: Form Bcc: x@evil.example");
  assert.equal(email.messageId, message.messageId);
  assert.equal(
    email.text?.replace(/\r\n/g, "\n"),
    [
      "Form: Form Bcc: x@evil.example",
      `Submission ID: ${envelope.submissionId}`,
      "Submitted At: 2026-03-04T05:06:07.000Z",
      "Origin: (none)",
      "IP: (none)",
      "Payload:",
      JSON.stringify(envelope.payload, null, 2),
    ].join("\n") + "\n",
  );
});

/** A Variant B message of `sample` from notify@platform.example. */
function variantB(sample: SubmissionEnvelope) {
  return buildMessage(sample, {
    layout: "alternative",
    from: "notify@platform.example",
    to: ["inbox@customer.example"],
    subjectTemplate: "Form submission: {{formName}}",
    destinationId: "dest",
  });
}

Deno.test("buildMessage Variant B has plain and HTML parts, Reply-To line and metadata headers", async () => {
  const message = variantB(envelope);
  const email = await PostalMime.parse(message.data);
  // The display name is the service's, for the form: not the form's name (platformSenderName).
  assert.deepEqual(email.from, {
    name: "Form form9 via formrelay",
    address: "notify@platform.example",
  });
  assert.deepEqual(email.replyTo, [{ name: "", address: "reader@example.org" }]);
  const headers = new Map(email.headers.map((h) => [h.key, h.value]));
  assert.equal(headers.get("x-formrelay-form-id"), "form-9");
  assert.equal(headers.get("x-formrelay-submission-id"), envelope.submissionId);
  const text = email.text?.replace(/\r\n/g, "\n") ?? "";
  assert.match(
    text,
    /^Form: Newsletter\nSubmission ID: [^\n]+\nSubmitted At: [^\n]+\nReply-To: reader@example\.org\nOrigin: \(none\)\nIP: \(none\)\nPayload:\n\{/,
  );
  assert.match(email.html ?? "", /<th[^>]*>Reply-To<\/th><td>reader@example\.org<\/td>/);
  assert.match(email.html ?? "", /<pre>\{\n {2}&quot;email&quot;/);
});

Deno.test("buildMessage Variant B never puts the tenant's form name in the From display name", async () => {
  const formId = "3f2a9c1e-8b7d-4c6a-9e5f-0a1b2c3d4e5f";
  const message = variantB({ ...envelope, formId, formName: "PayPal Security Team" });
  const email = await PostalMime.parse(message.data);
  assert.deepEqual(email.from, {
    name: "Form 3f2a9c1e via formrelay",
    address: "notify@platform.example",
  });
  const from = message.data.split("\r\n").find((line) => line.startsWith("From:"));
  assert.doesNotMatch(from ?? "", /PayPal/);
});

Deno.test("buildMessage Variant A has no Reply-To without a valid top-level email", () => {
  for (const payload of [{ email: "not an address" }, { contact: { email: "a@b.example" } }, "x"]) {
    const message = buildMessage({ ...envelope, payload }, {
      layout: "plain",
      from: "forms@tenant.example",
      to: ["a@tenant.example"],
      subjectTemplate: "New: {{formName}}",
      destinationId: "dest",
    });
    const head = message.data.slice(0, message.data.indexOf("\r\n\r\n"));
    assert.ok(!/^Reply-To:/im.test(head), JSON.stringify(payload));
  }
});

Deno.test("renderSubject: a subject naming a 128 KB field hundreds of times is cut to its limit", () => {
  const subject = renderSubject("{{fields.x}}".repeat(341), {
    ...envelope,
    payload: { x: "&\n".repeat(64 * 1024) },
  });
  assert.equal(subject.length, MAX_SUBJECT_CHARS);
  assert.ok(subject.startsWith(`${"& ".repeat(99)}&…${"& ".repeat(99)}&…`), subject);
  assert.ok(subject.endsWith("…"));
});
