import assert from "node:assert/strict";
import { jsonRequestHeaders, parseRetryAfter, USER_AGENT } from "./http.ts";
import { VERSION } from "../version.ts";

Deno.test("parseRetryAfter reads delay-seconds and HTTP-dates", () => {
  const now = Date.parse("2025-01-02T03:04:05Z");
  assert.equal(parseRetryAfter(null, now), undefined);
  assert.equal(parseRetryAfter("7", now), 7000);
  assert.equal(parseRetryAfter(" 0 ", now), 0);
  assert.equal(parseRetryAfter("120", now), 120_000);
  assert.equal(parseRetryAfter("Thu, 02 Jan 2025 03:05:05 GMT", now), 60_000);
  assert.equal(parseRetryAfter("Thursday, 02-Jan-25 03:05:05 GMT", now), 60_000);
  assert.equal(parseRetryAfter("Thu Jan  2 03:04:15 2025", now), 10_000);
  assert.equal(parseRetryAfter("Wed, 01 Jan 2025 00:00:00 GMT", now), 0);
  for (const invalid of ["", "-1", "1.5", "soon", "7 seconds", "2025-01-02T03:05:05Z"]) {
    assert.equal(parseRetryAfter(invalid, now), undefined, invalid);
  }
});

Deno.test("jsonRequestHeaders puts Content-Type and User-Agent over the given headers", () => {
  const headers = jsonRequestHeaders({ "content-type": "text/plain", "X-A": "1" });
  assert.equal(headers.get("content-type"), "application/json");
  assert.equal(headers.get("user-agent"), `formrelay/${VERSION}`);
  assert.equal(USER_AGENT, `formrelay/${VERSION}`);
  assert.equal(headers.get("x-a"), "1");
});
