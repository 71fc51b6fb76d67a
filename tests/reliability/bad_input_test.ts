/**
 * Reliability 3: bad input at volume. Over 10 000 generated malformed requests to the
 * ingestion and admin endpoints (wrong types, broken encodings, multipart boundary games,
 * lying lengths, huge headers, deep JSON, invalid UTF-8, slow bodies) get no 5xx and no
 * crash, memory stays bounded, and valid submissions sent meanwhile are all accepted and
 * delivered.
 */
import assert from "node:assert/strict";
import { rssMb } from "../../bench/lib.ts";
import { concatBytes } from "../../bytes.ts";
import { startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { waitFor } from "../helpers/wait.ts";
import {
  adminClient,
  createFormWith,
  findPlaintext,
  prepareWorkspace,
  submit,
} from "./helpers/cluster.ts";
import { rawExchange } from "./helpers/raw.ts";

const MALFORMED = 10_500;
const WORKERS = 32;
const SLOW_BODIES = 20;
const VALID = 300;

const encoder = new TextEncoder();
const bytes = (...parts: (string | number[])[]) =>
  concatBytes(parts.map((p) => typeof p === "string" ? encoder.encode(p) : new Uint8Array(p)));

/** A small deterministic generator, so that a failure can be replayed. */
function random(seed: number) {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

Deno.test("10 000 malformed requests: no 5xx, no crash, bounded memory, valid submissions all delivered", async () => {
  const workspace = await prepareWorkspace(1);
  const marker = `bad-input-marker-${crypto.randomUUID()}`;
  const sink = startWebhookSink();
  const service = await startServiceProcess(workspace.env, { stderr: "piped" });
  try {
    const origin = service.origin;
    const port = Number(new URL(origin).port);
    const tenantKey = workspace.orgs[0].tenantKey;
    const admin = adminClient(() => origin, tenantKey);
    const form = await createFormWith(admin, "Bad input", [
      { type: "webhook", config: { url: sink.url } },
    ]);
    const pk = form.publicKey;
    const formPath = `/v1/admin/forms/${form.formId}`;
    const destPath = `${formPath}/destinations/${form.destinationIds[0]}`;

    // Warm-up, then the baseline memory reading.
    for (let i = 0; i < 200; i++) assert.equal((await submit(origin, pk, { i })).status, 202);
    await waitFor(() => sink.received.length >= 200, { timeoutMs: 20_000 });
    const rssBefore = await rssMb(service.child.pid);

    const post = async (path: string, init: RequestInit): Promise<number[]> => {
      const response = await fetch(`${origin}${path}`, init);
      await response.body?.cancel();
      return [response.status];
    };
    const ingest = (contentType: string, body: BodyInit) =>
      post(`/v1/f/${pk}`, { method: "POST", headers: { "content-type": contentType }, body });
    const adminReq = (method: string, path: string, body?: BodyInit, type = "application/json") =>
      post(path, {
        method,
        headers: { "x-tenant-key": tenantKey, "content-type": type },
        body,
      });
    const deep = (n: number) => "[".repeat(n) + "]".repeat(n);
    const deepObject = (n: number) => '{"a":'.repeat(n) + "1" + "}".repeat(n);
    const raw = (head: string, body: string | Uint8Array = "", options = {}) =>
      rawExchange(port, [bytes(head), typeof body === "string" ? bytes(body) : body], options);
    const boundary = "----formrelay-test-boundary";

    // Each generator makes one malformed request from a random source.
    const generators: ((r: () => number) => Promise<number[]>)[] = [
      // Wrong and broken content types on ingestion.
      (r) =>
        ingest(
          [
            "text/plain",
            "application/xml",
            "",
            "application/json; charset=utf-16",
            "image/png",
            "application/x-www-form-urlencoded; charset=bogus",
            "multipart/form-data",
            "multipart/form-data; boundary=",
            "application/jsonx",
            "*/*",
          ][Math.floor(r() * 10)],
          '{"a":1}',
        ),
      // Invalid JSON.
      (r) =>
        ingest(
          "application/json",
          [
            '{"a":',
            "{'a':1}",
            '{"a":NaN}',
            "[1,2,",
            '{"a":1}}',
            "\u0000",
            "tru",
            '"\\x"',
            '{"a":"\\ud800"',
            "-",
          ][Math.floor(r() * 10)],
        ),
      // Invalid UTF-8 inside JSON and form bodies.
      (r) =>
        ingest(
          r() < 0.5 ? "application/json" : "application/x-www-form-urlencoded",
          bytes('{"name":"', [0xff, 0xfe, 0xc3, 0x28, 0xe2, 0x82], '"}'),
        ),
      // Deep JSON, as an array or as objects.
      (r) => ingest("application/json", r() < 0.5 ? deep(20_000) : deepObject(15_000)),
      // Broken URL encoding.
      (r) =>
        ingest(
          "application/x-www-form-urlencoded",
          [
            "%ZZ=1",
            "a=%E0%A4%A",
            "=&&==&",
            "a=" + "%".repeat(1000),
            "%00=%00",
            "a[]=1&a[b]=2&a=3",
          ][Math.floor(r() * 6)],
        ),
      // Multipart boundary games.
      (r) => {
        const bodies = [
          `--${boundary}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n`, // unterminated
          `--other\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--other--\r\n`,
          `--${boundary}\r\nContent-Disposition: form-data; name="f"; filename="x.txt"\r\n\r\nx\r\n--${boundary}--\r\n`,
          `--${boundary}\r\nno colon header\r\n\r\n1\r\n--${boundary}--\r\n`,
          `--${boundary}--\r\n`,
          `--${boundary}\r\nContent-Disposition: form-data; name="a"\r\n\r\n--${boundary}\r\n--${boundary}--`,
          `--${boundary}\r\nContent-Disposition: form-data\r\n\r\nnameless\r\n--${boundary}--\r\n`,
        ];
        const type = r() < 0.8
          ? `multipart/form-data; boundary=${boundary}`
          : `multipart/form-data; boundary="${"b".repeat(200)}"`;
        return ingest(type, bodies[Math.floor(r() * bodies.length)]);
      },
      // Admin: wrong types in form fields.
      (r) =>
        adminReq(
          ["POST", "PATCH"][Math.floor(r() * 2)],
          r() < 0.5 ? "/v1/admin/forms" : formPath,
          JSON.stringify(
            [
              { name: 123 },
              { name: ["a"] },
              { name: "" },
              { allowedOrigins: "https://x.example" },
              { verifyCaptcha: "yes" },
              { name: "x", enabled: 1 },
              { name: "x", redirectUrl: "javascript:alert(1)" },
              { __proto__: { polluted: true }, name: 1 },
              null,
              "form",
            ][Math.floor(r() * 10)],
          ),
        ),
      // Admin: wrong destination configs.
      (r) =>
        adminReq(
          "POST",
          `${formPath}/destinations`,
          JSON.stringify(
            [
              { type: "ftp", config: {} },
              { type: "webhook", config: { url: "notaurl" } },
              { type: "webhook", config: { url: "http://x.example", headers: { "a\r\nb": "c" } } },
              { type: "webhook", config: { url: "http://x.example", method: "DELETE" } },
              { type: "smtp", config: { host: "h", port: "25", username: "u", password: "p" } },
              { type: "smtp", config: { host: "h", port: 0, to: "x" } },
              { type: "sheets_webhook", config: { url: 5 } },
              { type: "webhook" },
              { type: "webhook", config: { url: "http://x.example" }, isEnabled: "true" },
            ][Math.floor(r() * 9)],
          ),
        ),
      // Admin: broken bodies (invalid JSON, invalid UTF-8, deep JSON, wrong type).
      (r) => {
        const bodies: [BodyInit, string][] = [
          ["{", "application/json"],
          [bytes('{"name":"', [0xff, 0xc0], '"}'), "application/json"],
          [deep(20_000), "application/json"],
          ["name=x", "application/x-www-form-urlencoded"],
          ["", "application/json"],
        ];
        const [body, type] = bodies[Math.floor(r() * bodies.length)];
        return adminReq(r() < 0.5 ? "POST" : "PATCH", r() < 0.5 ? formPath : destPath, body, type);
      },
      // Admin: path and query games.
      (r) =>
        adminReq(
          ["GET", "DELETE", "PATCH", "PUT"][Math.floor(r() * 4)],
          [
            `${formPath}/deliveries?limit=abc`,
            `${formPath}/deliveries?limit=-1`,
            `${formPath}/deliveries?limit=1e9&x=1`,
            "/v1/admin/forms/..%2F..%2Fkeys%2Frotate",
            "/v1/admin/forms/%00",
            `/v1/admin/forms/${"x".repeat(5000)}`,
            `${formPath}/destinations/%E0%A4%A`,
            "/v1/admin/forms/%ZZ/destinations",
          ][Math.floor(r() * 8)],
        ),
      // Admin: tenant key games.
      (r) =>
        post("/v1/admin/forms", {
          headers: {
            "x-tenant-key": ["sk_" + "a".repeat(10_000), "pk_x", "sk_", " ", "sk_%00"][
              Math.floor(r() * 5)
            ],
          },
        }),
      // Lying lengths and broken framing.
      (r) => {
        const path = r() < 0.7 ? `/v1/f/${pk}` : "/v1/admin/forms";
        const head = (headers: string) =>
          `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
          `x-tenant-key: ${tenantKey}\r\n${headers}\r\n`;
        const cases: [string, string, object][] = [
          [head("Content-Length: 1000\r\n"), '{"a":1}', { closeWrite: true }],
          [head("Content-Length: 3\r\nConnection: close\r\n"), '{"a":1}', {}],
          [head("Content-Length: -1\r\nConnection: close\r\n"), '{"a":1}', {}],
          [head("Content-Length: abc\r\nConnection: close\r\n"), '{"a":1}', {}],
          [head("Content-Length: 7\r\nContent-Length: 9\r\nConnection: close\r\n"), '{"a":1}', {}],
          [
            head("Content-Length: 7\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"),
            '7\r\n{"a":1}\r\n0\r\n\r\n',
            {},
          ],
          [
            head("Transfer-Encoding: chunked\r\nConnection: close\r\n"),
            "zz\r\nxx\r\n0\r\n\r\n",
            {},
          ],
          [
            head("Transfer-Encoding: chunked\r\nConnection: close\r\n"),
            "ffffffffffffffffffff\r\nx\r\n",
            {},
          ],
          [head("Transfer-Encoding: chunked\r\n"), '5\r\n{"a":', { closeWrite: true }],
          [head("Content-Length: 99999999999999999999\r\nConnection: close\r\n"), "{}", {}],
        ];
        const [h, body, options] = cases[Math.floor(r() * cases.length)];
        return raw(h, body, options);
      },
      // Huge headers, many headers, invalid bytes in the request head.
      (r) => {
        const cases: Uint8Array[] = [
          bytes(
            `POST /v1/f/${pk} HTTP/1.1\r\nHost: x\r\nX-Big: ${
              "a".repeat(70_000)
            }\r\nConnection: close\r\n\r\n`,
          ),
          bytes(
            `POST /v1/f/${pk} HTTP/1.1\r\nHost: x\r\n${
              Array.from({ length: 500 }, (_, i) => `X-H${i}: v\r\n`).join("")
            }Connection: close\r\n\r\n`,
          ),
          bytes(
            `GET /v1/admin/forms HTTP/1.1\r\nHost: x\r\nx-tenant-key: sk_`,
            [0xff, 0x00, 0xfe],
            `\r\nConnection: close\r\n\r\n`,
          ),
          bytes(`POST /v1/f/`, [0xff, 0xfe], ` HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`),
          bytes(
            `POST /v1/f/${pk}?${
              "q".repeat(20_000)
            } HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
          ),
          bytes(
            `POST /v1/f/${pk} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nBad Header\r\nConnection: close\r\n\r\n{}`,
          ),
          bytes(`BREW /v1/f/${pk} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`),
          bytes(`POST /v1/f/${pk} HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n`),
        ];
        return rawExchange(port, [cases[Math.floor(r() * cases.length)]]);
      },
    ];

    // Valid submissions all along, paced.
    const validAccepted = new Set<string>();
    const validStatuses: number[] = [];
    const valid = (async () => {
      for (let i = 0; i < VALID; i++) {
        const result = await submit(origin, pk, { marker, i, email: "ada@example.org" })
          .catch(() => ({ status: 0, submissionId: null })); // 0: no answer at all
        validStatuses.push(result.status);
        if (result.submissionId) validAccepted.add(result.submissionId);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();

    // Slow bodies: a declared length sent a byte every 50 ms.
    const slow = Array.from({ length: SLOW_BODIES }, (_, i) => {
      const body = JSON.stringify({ slow: i, pad: "x".repeat(20) });
      const head = `POST /v1/f/${pk} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length + 10}\r\nConnection: close\r\n\r\n`;
      return rawExchange(port, [head, ...body.split("")], { gapMs: 50, waitMs: 6000 });
    });

    const statuses = new Map<number, number>();
    let noAnswer = 0;
    let next = 0;
    const started = Date.now();
    await Promise.all(Array.from({ length: WORKERS }, async () => {
      while (next < MALFORMED) {
        const i = next++;
        const r = random(i + 1);
        const seen = await generators[i % generators.length](r);
        if (seen.length === 0) noAnswer++;
        for (const status of seen) statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (seen.some((s) => s >= 500)) {
          throw new Error(`request ${i} (generator ${i % generators.length}) answered ${seen}`);
        }
      }
    }));
    const slowStatuses = (await Promise.all(slow)).flat();
    await valid;
    const elapsed = Date.now() - started;

    const health = await fetch(`${origin}/healthz`);
    await health.body?.cancel();
    const rssAfter = await rssMb(service.child.pid);
    await waitFor(
      () =>
        [...validAccepted].every((id) => sink.received.some((r) => r.json?.submissionId === id)),
      { timeoutMs: 60_000, message: "valid submissions delivered" },
    );
    console.log(
      `bad input figures: ${MALFORMED} malformed + ${SLOW_BODIES} slow bodies in ${elapsed} ms; ` +
        `statuses ${JSON.stringify(Object.fromEntries([...statuses].sort()))}, no answer ` +
        `${noAnswer}, slow ${JSON.stringify(slowStatuses)}; RSS ${rssBefore} → ${rssAfter} MB; ` +
        `valid ${validAccepted.size}/${VALID} accepted and delivered`,
    );
    assert.equal(health.status, 200);
    const exited = await Promise.race([
      service.child.status.then(() => true),
      Promise.resolve(false),
    ]);
    assert.equal(exited, false, "the service died");
    assert.ok([...statuses.keys()].every((s) => s < 500));
    assert.ok(slowStatuses.every((s) => s < 500));
    assert.deepEqual(validStatuses.filter((s) => s !== 202), []);
    assert.equal(validAccepted.size, VALID);
    assert.ok(rssAfter - rssBefore < 100, `RSS grew from ${rssBefore} to ${rssAfter} MB`);

    await service.kill("SIGTERM");
    const logs = [...service.lines, ...service.stderrLines];
    assert.deepEqual(logs.filter((l) => l.includes('"level":"error"')), []);
    assert.deepEqual(await findPlaintext(marker, { dir: workspace.dir, logs }), []);
  } finally {
    await service.kill("SIGKILL");
    await sink.close();
    await workspace.remove();
  }
});
