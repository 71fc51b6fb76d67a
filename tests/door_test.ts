/**
 * The door against slow bodies, in process on a real guarded listener: the minimum
 * body rate after its grace, a late body counting toward the rate limit, connections
 * whose bodies are still arriving closed for a newcomer at the bound, and a deadline
 * and size cap on every admin route's body. The attacks from many addresses against
 * main.ts are in tests/reliability/door_test.ts.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { readAll, startGuardedHarness, startSlowPost } from "./helpers/slow_post.ts";
import { waitFor } from "./helpers/wait.ts";

const encoder = new TextEncoder();

const setUp = startGuardedHarness;

Deno.test("a body slower than HTTP_BODY_MIN_RATE after its grace is 408 long before its deadline", async () => {
  await using s = await setUp({
    http: { bodyTimeoutMs: 10_000, bodyGraceMs: 300, bodyMinBytesPerSecond: 500 },
  });
  const conn = await startSlowPost(s.port, `/v1/f/${s.form.publicKey}`, { length: 2000 });
  // Ten bytes a second: far under the minimum.
  const trickle = setInterval(() => conn.write(encoder.encode(" ")).catch(() => 0), 100);
  const started = performance.now();
  try {
    const answer = await readAll(conn);
    assert.match(answer, /^HTTP\/1\.1 408 /);
    assert.match(answer, /"error":"Request body not received in time"/);
    assert.ok(performance.now() - started < 5000, "cut by the rate, not the 10 s deadline");
  } finally {
    clearInterval(trickle);
  }
});

Deno.test("a body keeping the minimum rate past its grace is accepted", async () => {
  await using s = await setUp({
    http: { bodyTimeoutMs: 10_000, bodyGraceMs: 300, bodyMinBytesPerSecond: 500 },
  });
  const body = JSON.stringify({ message: "x".repeat(1480) });
  const conn = await startSlowPost(s.port, `/v1/f/${s.form.publicKey}`, {
    length: body.length,
    start: body.slice(0, 100),
    headers: { connection: "close" },
  });
  // 200 bytes every 100 ms: 2 000 bytes a second, four times the minimum.
  let sent = 100;
  const send = setInterval(() => {
    if (sent >= body.length) return clearInterval(send);
    conn.write(encoder.encode(body.slice(sent, sent + 200))).catch(() => 0);
    sent += 200;
  }, 100);
  try {
    assert.match(await readAll(conn), /^HTTP\/1\.1 202 /);
  } finally {
    clearInterval(send);
  }
});

Deno.test("a body that times out uses its client's rate-limit slot", async () => {
  await using s = await setUp({
    http: { bodyTimeoutMs: 300 },
    rateLimit: { max: 2, windowMs: 600_000 },
  });
  const path = `/v1/f/${s.form.publicKey}`;
  for (let i = 0; i < 2; i++) {
    assert.match(
      await readAll(await startSlowPost(s.port, path, { length: 100 })),
      /^HTTP\/1\.1 408 /,
    );
  }
  const response = await fetch(`http://127.0.0.1:${s.port}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{}",
  });
  assert.equal(response.status, 429, "two 408s used the client's two submissions");
  assert.ok(Number(response.headers.get("retry-after")) > 0);
  await response.body?.cancel();
});

/** A connection from `localAddress` that sends a head declaring `length` bytes and one byte. */
function slowBodyFrom(port: number, path: string, localAddress: string) {
  const socket = net.connect({ port, host: "127.0.0.1", localAddress });
  const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
  socket.on("error", () => {});
  socket.on("connect", () => {
    socket.write(
      `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
        `content-length: 100\r\n\r\n[`,
    );
  });
  return { socket, closed };
}

Deno.test("at the connection bound a connection whose body is still arriving gives way to a newcomer", async () => {
  await using s = await setUp({ rateLimit: { max: 0, windowMs: 60_000 } }, { maxConnections: 4 });
  const path = `/v1/f/${s.form.publicKey}`;
  // Four addresses each hold one connection, their bodies arriving (slowly): the bound.
  const slow = [2, 3, 4, 5].map((n) => slowBodyFrom(s.port, path, `127.0.0.${n}`));
  try {
    await waitFor(() => s.h.service.bodyGate.stats().bodies === 4, {
      message: () => `${s.h.service.bodyGate.stats().bodies} of 4 bodies being read`,
    });
    assert.equal(s.server.stats().connections, 4);
    const response = await fetch(`http://127.0.0.1:${s.port}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", connection: "close" },
      body: '{"name":"Ada"}',
    });
    assert.equal(response.status, 202, "the visitor got in");
    await response.body?.cancel();
    // One of them (the oldest to start reading, which on a busy machine need not be the
    // first to connect) was closed for it; the other three still hold theirs.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const closed = await Promise.race([
      ...slow.map(({ closed }) => closed.then(() => true)),
      new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), 10_000)),
    ]);
    clearTimeout(timer);
    assert.ok(closed, "a slow body was closed for the newcomer");
    assert.equal(s.h.service.bodyGate.stats().bodies, 3);
  } finally {
    slow.forEach(({ socket }) => socket.destroy());
  }
});

Deno.test("every admin route ends a body that does not arrive: 408, or answered and closed", async () => {
  await using s = await setUp({ http: { bodyTimeoutMs: 300 } });
  const f = `/v1/admin/forms/${s.form.id}`;
  const d = `${f}/destinations/${s.destinationId}`;
  const unknown = crypto.randomUUID();
  // Each route, and its answer to a stalled body with a JSON type and with none.
  const routes: [string, string, { json: number; none: number }][] = [
    ["POST", "/v1/admin/forms", { json: 408, none: 415 }],
    ["GET", "/v1/admin/forms", { json: 200, none: 200 }],
    ["GET", f, { json: 200, none: 200 }],
    ["PATCH", f, { json: 408, none: 415 }],
    ["DELETE", `/v1/admin/forms/${unknown}`, { json: 404, none: 404 }],
    ["POST", `${f}/destinations`, { json: 408, none: 415 }],
    ["GET", `${f}/destinations`, { json: 200, none: 200 }],
    ["PATCH", d, { json: 408, none: 415 }],
    ["DELETE", `${f}/destinations/${unknown}`, { json: 404, none: 404 }],
    ["POST", `${d}/test`, { json: 408, none: 408 }],
    ["POST", `${d}/resume`, { json: 408, none: 408 }],
    ["POST", `${d}/redeliver`, { json: 408, none: 415 }],
    ["POST", `${d}/rotate-secret`, { json: 408, none: 408 }],
    ["POST", "/v1/admin/notifications/webhook/rotate-secret", { json: 408, none: 408 }],
    ["GET", `${f}/deliveries`, { json: 200, none: 200 }],
    ["POST", `${f}/deliveries/${unknown}/redeliver`, { json: 408, none: 408 }],
  ];
  const stalled = async (method: string, path: string, contentType: string | null) => {
    const conn = await startSlowPost(s.port, path, {
      method,
      length: 1000,
      contentType,
      headers: { "x-tenant-key": s.h.tenantKey },
    });
    // Closed by the server within 5 s, or the test fails.
    return Number((await readAll(conn, 5000)).slice(9, 12));
  };
  const answers = await Promise.all(routes.map(async ([method, path]) => ({
    json: await stalled(method, path, "application/json"),
    none: await stalled(method, path, null),
  })));
  assert.deepEqual(
    answers.map((answer, i) => [routes[i][0], routes[i][1], answer]),
    routes.map(([method, path, expected]) => [method, path, expected]),
  );
  // Key rotation reads its optional body as the others do (none arrives in time: nothing
  // is rotated); last, since a rotation would change the key.
  assert.equal(await stalled("POST", "/v1/admin/keys/rotate", null), 408);
  assert.equal((await s.h.admin("GET", "/forms")).status, 200);
});

Deno.test("an admin body over 64 KB without a content type is 413, as with one", async () => {
  await using s = await setUp();
  const path = `/v1/admin/forms/${s.form.id}/destinations/${s.destinationId}/resume`;
  for (const type of [undefined, "application/json"]) {
    const response = await fetch(`http://127.0.0.1:${s.port}${path}`, {
      method: "POST",
      headers: { "x-tenant-key": s.h.tenantKey, ...(type ? { "content-type": type } : {}) },
      // Sent chunked: no declared length to refuse it by.
      body: ReadableStream.from([encoder.encode("x".repeat(70_000))]),
    });
    assert.equal(response.status, 413, `with content type ${type}`);
    assert.equal((await response.json()).error, "Payload too large (max 64KB)");
  }
});
