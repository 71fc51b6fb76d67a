import assert from "node:assert/strict";
import {
  jsonRequestHeaders,
  parseRetryAfter,
  readPaceHint,
  settleResponse,
  startAttempt,
  USER_AGENT,
} from "./http.ts";
import type { HttpTransport } from "./http_transport.ts";
import { DeliveryError } from "./types.ts";
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

Deno.test("jsonRequestHeaders puts Content-Type and User-Agent over the given headers, as a Headers object would", () => {
  const given = {
    "Content-Type": "text/plain",
    "X-A": " 1\t",
    "x-b": "2",
    "X-B": "3",
    "User-Agent": "mine",
    "toString": "4",
    ["__proto__"]: "5",
  };
  const headers = jsonRequestHeaders(given);
  assert.deepEqual({ ...headers }, {
    "content-type": "application/json",
    "x-a": "1",
    "x-b": "2, 3",
    "tostring": "4",
    ["__proto__"]: "5",
    "user-agent": `formrelay/${VERSION}`,
  });
  assert.equal(USER_AGENT, `formrelay/${VERSION}`);
  // The same as the Headers object it replaces.
  const object = new Headers(given);
  object.set("content-type", "application/json");
  object.set("user-agent", USER_AGENT);
  assert.deepEqual([...new Headers(headers)], [...object]);
});

Deno.test("settleResponse blames one submission for 400, 413, 415 and 422, the destination for the rest", async () => {
  const url = new URL("https://hooks.example.com/in");
  const cases: [number, "submission" | "destination", boolean][] = [
    [400, "submission", true],
    [413, "submission", true],
    [415, "submission", true],
    [422, "submission", true],
    [401, "destination", true],
    [403, "destination", true],
    [404, "destination", true],
    [410, "destination", true],
    [302, "destination", true],
    [429, "destination", false],
    [500, "destination", false],
    [503, "destination", false],
  ];
  for (const [status, blame, permanent] of cases) {
    const error = await settleResponse(url, new Response(null, { status })).catch((e) => e);
    assert.ok(error instanceof DeliveryError, `${status}`);
    assert.deepEqual([error.blame, error.permanent], [blame, permanent], `${status}`);
  }
  assert.deepEqual(await settleResponse(url, new Response("ok")), { statusCode: 200 });
});

Deno.test("a DeliveryError is the destination's fault unless said otherwise", () => {
  assert.equal(new DeliveryError("x", { permanent: false }).blame, "destination");
  assert.equal(
    new DeliveryError("x", { permanent: true, blame: "submission" }).blame,
    "submission",
  );
});

Deno.test("readPaceHint: a 429, or a 503 with Retry-After, is a refusal for rate; quota headers are read", () => {
  const now = Date.parse("2025-01-02T03:04:05Z");
  const answer = (status: number, headers: Record<string, string> = {}) =>
    readPaceHint(new Response(null, { status, headers }), now);
  assert.deepEqual(answer(429, { "retry-after": "1" }), { limited: true, retryAfterMs: 1000 });
  assert.deepEqual(
    answer(429),
    { limited: true },
    "a 429 without Retry-After still refuses for rate",
  );
  assert.deepEqual(answer(503, { "retry-after": "Thu, 02 Jan 2025 03:05:05 GMT" }), {
    limited: true,
    unavailable: true,
    retryAfterMs: 60_000,
  });
  assert.equal(answer(503), undefined, "a plain 503 is an overload, not a rate");
  assert.equal(answer(500, { "retry-after": "5" }), undefined);
  assert.deepEqual(
    answer(204, { "x-ratelimit-remaining": "0", "x-ratelimit-reset-after": "1.25" }),
    { remaining: 0, resetAfterMs: 1250 },
    "Discord's headers",
  );
  assert.deepEqual(
    answer(200, { "x-ratelimit-remaining": "3", "x-ratelimit-reset": String(now / 1000 + 30) }),
    { remaining: 3, resetAfterMs: 30_000 },
    "an epoch reset",
  );
  assert.deepEqual(
    answer(200, { "ratelimit-remaining": "0", "ratelimit-reset": "7" }),
    { remaining: 0, resetAfterMs: 7000 },
    "the IETF draft's headers",
  );
  assert.equal(
    answer(200, { "x-ratelimit-remaining": "0" }),
    undefined,
    "no reset: nothing to hold for",
  );
  assert.equal(
    answer(200, { "x-ratelimit-remaining": "x", "x-ratelimit-reset-after": "1" }),
    undefined,
  );
});

Deno.test("settleResponse carries the pace hint on a refusal for rate and on a receipt", async () => {
  const url = new URL("https://hooks.example.com/in");
  const refused = await settleResponse(
    url,
    new Response(null, { status: 429, headers: { "retry-after": "2" } }),
  ).catch((e) => e);
  assert.ok(refused instanceof DeliveryError);
  assert.deepEqual(refused.pace, { limited: true, retryAfterMs: 2000 });
  assert.equal(refused.retryAfterMs, 2000);
  const receipt = await settleResponse(
    url,
    new Response("ok", {
      headers: { "x-ratelimit-remaining": "0", "x-ratelimit-reset-after": "1" },
    }),
  );
  assert.deepEqual(receipt, { statusCode: 200, pace: { remaining: 0, resetAfterMs: 1000 } });
});

Deno.test("attempts started together share one time-out, each given at least its whole time-out", async () => {
  // A receiver that never answers: each request ends when its attempt's signal aborts.
  const transport: HttpTransport = {
    request: (_url, init) =>
      new Promise((_resolve, reject) =>
        init.signal.addEventListener("abort", () => reject(init.signal.reason), { once: true })
      ),
    close() {},
  };
  const deps = { timeoutMs: 200, transport };
  const parent = new AbortController().signal;
  const url = new URL("https://hooks.example.com/in");
  const attempt = async () => {
    const started = performance.now();
    const error = await startAttempt(deps, parent)(url, { method: "POST", headers: {} })
      .then(() => null, (error) => error);
    return { started, ended: performance.now(), error };
  };
  const first = attempt();
  // The second starts a little later, within the 50 ms the signal is shared for.
  await new Promise((resolve) => setTimeout(resolve, 20));
  const [a, b] = await Promise.all([first, attempt()]);
  for (const { started, ended, error } of [a, b]) {
    assert.ok(error instanceof DeliveryError);
    assert.equal(
      error.message,
      `Cannot deliver to "https://hooks.example.com": no answer within 200 ms`,
    );
    assert.ok(ended - started >= 199, `ended after ${ended - started} ms`);
  }
  if (b.started - a.started < 50) {
    assert.ok(Math.abs(b.ended - a.ended) < 10, "both ended on the one shared timer");
  }
});
