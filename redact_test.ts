import assert from "node:assert/strict";
import { createLogger, describeError } from "./log.ts";
import { redactUrls, redactUrlSecrets, urlOrigin } from "./redact.ts";

Deno.test("urlOrigin keeps scheme, host and port only", () => {
  assert.equal(
    urlOrigin(new URL("https://user:pw@hooks.example:8443/in/x?token=s3cret#frag")),
    "https://hooks.example:8443",
  );
  assert.equal(urlOrigin("http://[::1]/"), "http://[::1]");
  assert.equal(urlOrigin("https://hooks.example:443/T0/B1/secret"), "https://hooks.example");
  assert.equal(urlOrigin("not a url"), "(invalid URL)");
});

Deno.test("redactUrls cuts every URL in a text down to its origin", () => {
  const cases: [string, string][] = [
    ["no url here", "no url here"],
    [
      "error sending request for url (https://hooks.slack.com/services/T0/B1/s3cret?x=1): client error (Connect)",
      "error sending request for url (https://hooks.slack.com): client error (Connect)",
    ],
    [
      "error sending request from 127.0.0.1:5 for http://h.example:81/a/s3cret (127.0.0.1:81): refused",
      "error sending request from 127.0.0.1:5 for http://h.example:81 (127.0.0.1:81): refused",
    ],
    [
      'Cannot deliver to "http://u:s3cret@h.example/x": 404',
      'Cannot deliver to "http://h.example": 404',
    ],
    ["redirect to http://h.example/s3cret.", "redirect to http://h.example."],
    [
      "two: http://a.example/s3cret, https://b.example:8443/s3cret",
      "two: http://a.example, https://b.example:8443",
    ],
    [
      "broken http://[zz/s3cret and other x://host.example/s3cret",
      "broken http://… and other x://host.example",
    ],
    ["a backslash http://h.example/a\\s3cret", "a backslash http://h.example"],
  ];
  for (const [text, expected] of cases) assert.equal(redactUrls(text), expected);
});

Deno.test("describeError and every log line cut URLs down to their origin", () => {
  const error = new TypeError("fetch to https://h.example/s3cret failed");
  assert.equal(describeError(error), "TypeError: fetch to https://h.example failed");
  const lines: string[] = [];
  const logger = createLogger("info", (line) => lines.push(line));
  logger.info("at https://h.example/s3cret", {
    error: 'Cannot deliver to "https://h.example/s3cret?q=s3cret": 500',
    nested: { url: "http://h.example:81/s3cret" },
    count: 3,
  });
  assert.equal(lines.length, 1);
  assert.ok(!lines[0].includes("s3cret"), lines[0]);
  const parsed = JSON.parse(lines[0]);
  assert.equal(parsed.msg, "at https://h.example");
  assert.equal(parsed.error, 'Cannot deliver to "https://h.example": 500');
  assert.deepEqual(parsed.nested, { url: "http://h.example:81" });
  assert.equal(parsed.count, 3);
});

Deno.test("redactUrlSecrets hides userinfo, query values and fragment, keeps scheme, host and path", () => {
  assert.equal(
    redactUrlSecrets("https://user:pass@hooks.example.com:8443/in/abc?token=s3cret&x=1#frag"),
    "https://********:********@hooks.example.com:8443/in/abc?token=********&x=********#********",
  );
  assert.equal(redactUrlSecrets("https://u@h.example/"), "https://********@h.example/");
  assert.equal(redactUrlSecrets("https://h.example/exec"), "https://h.example/exec");
  assert.equal(redactUrlSecrets("not a url"), "********");
});
