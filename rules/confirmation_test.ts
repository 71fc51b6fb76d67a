import assert from "node:assert/strict";
import { mailboxOf, maskAddress, visitorAddress } from "./confirmation.ts";

const addressOf = (value: unknown) => visitorAddress({ email: value }, "email");

Deno.test("visitorAddress: lower case, the domain in its IDNA ASCII form", () => {
  assert.equal(addressOf("  Ada@Example.ORG "), "ada@example.org");
  assert.equal(addressOf("ada@Bücher.example"), "ada@xn--bcher-kva.example");
  assert.equal(addressOf("ada@xn--bcher-kva.example"), "ada@xn--bcher-kva.example");
  assert.equal(addressOf("ada@例え.テスト"), "ada@xn--r8jz45g.xn--zckzah");
  // Full-width and ideographic full stops are dots (UTS 46).
  assert.equal(addressOf("ada@example。org"), "ada@example.org");
  // A local part that is not ASCII stays (sent with SMTPUTF8), in lower case, NFC.
  assert.equal(addressOf("JOSÉ@example.org"), "josé@example.org");
  assert.equal(addressOf("jose\u0301@example.org"), "josé@example.org");
});

Deno.test("visitorAddress: anything a relay or the URL parser could read otherwise is refused", () => {
  const refused = [
    undefined,
    42,
    "",
    "ada",
    "@example.org",
    "ada@",
    "ada@example",
    "ada@localhost",
    "ada@127.0.0.1",
    "ada@[127.0.0.1]",
    "ada@example.org:25",
    "ada@example.org/x",
    "ada@evil.example@example.org",
    "ada@exa mple.org",
    "ada@exa\tmple.org",
    "ada@example.org\r\nbcc: x@y.z",
    "ada\r\n@example.org",
    "a..b@example.org",
    ".ada@example.org",
    "ada.@example.org",
    "a<b>@example.org",
    "ada@-example.org",
    "ada@example.123",
    "ada@xn--.org",
    "a".repeat(65) + "@example.org",
    "é".repeat(33) + "@example.org",
    "ada@" + "a".repeat(250) + ".org",
  ];
  for (const value of refused) assert.equal(addressOf(value), null, JSON.stringify(value));
  assert.equal(visitorAddress(["ada@example.org"], "0"), null);
  assert.equal(visitorAddress(null, "email"), null);
});

Deno.test("mailboxOf: case, +tag, dots and the domain's spellings are one mailbox", () => {
  const spellings = [
    "victim@example.org",
    "victim+1@example.org",
    "victim+two@example.org",
    "VICTIM+x@example.org",
    "v.i.c.t.i.m@example.org",
    "Vic.tim+a+b@Example.org",
  ];
  for (const spelling of spellings) {
    assert.equal(mailboxOf(addressOf(spelling)!), "victim@example.org", spelling);
  }
  assert.equal(mailboxOf(addressOf("a.b+c@googlemail.com")!), "ab@gmail.com");
  assert.equal(
    mailboxOf(addressOf("ada+1@bücher.example")!),
    mailboxOf(addressOf("ADA@xn--bcher-kva.example")!),
  );
  // Other mailboxes stay apart.
  assert.notEqual(mailboxOf("victim@example.org"), mailboxOf("victim@example.net"));
  assert.notEqual(mailboxOf("victim@example.org"), mailboxOf("victim-1@example.org"));
  // A tag needs a mailbox before it.
  assert.equal(mailboxOf("+tag@example.org"), "+tag@example.org");
});

Deno.test("maskAddress shows the first character whole and the domain", () => {
  assert.equal(maskAddress("ada@example.org"), "a***@example.org");
  assert.equal(maskAddress("😀ada@example.org"), "😀***@example.org");
  assert.equal(maskAddress("@example.org"), "***");
});
