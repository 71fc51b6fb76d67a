import assert from "node:assert/strict";
import { createLogger } from "./log.ts";
import { type ConnectionInfo, type ListenerLimits, serveGuarded } from "./listener.ts";
import { readAll } from "./tests/helpers/slow_post.ts";

const encoder = new TextEncoder();

/** Serves `handler` with short limits; disposing shuts it down. */
function start(
  limits: Partial<ListenerLimits>,
  handler: (request: Request, info: ConnectionInfo) => Response | Promise<Response> = () =>
    new Response("ok"),
) {
  const logs: string[] = [];
  const server = serveGuarded({
    port: 0,
    hostname: "127.0.0.1",
    limits: {
      headersTimeoutMs: 300,
      keepAliveTimeoutMs: 300,
      maxConnections: 100,
      ...limits,
    },
    logger: createLogger("debug", (line) => logs.push(line)),
  }, handler);
  return Object.assign(server, {
    logs,
    connect: () => Deno.connect({ hostname: "127.0.0.1", port: server.addr.port }),
    [Symbol.asyncDispose]: () => server.shutdown(),
  });
}

/** Everything the server sends until it closes; fails if it is still open after `withinMs`. */
const readUntilClosed = readAll;

/** Idle connections from `localAddress`, one per name; `closed` names them as the server closes them. */
async function idleFlood(port: number, localAddress: string, names: string[]) {
  const net = await import("node:net");
  const closed: string[] = [];
  const sockets = names.map((name) => {
    const socket = net.connect({ port, host: "127.0.0.1", localAddress });
    socket.on("error", () => {});
    socket.on("close", () => closed.push(name));
    return socket;
  });
  return { closed, sockets };
}

Deno.test("serveGuarded closes a connection that sends no request head in time", async () => {
  await using server = start({ headersTimeoutMs: 200 });
  const conn = await server.connect();
  const started = performance.now();
  assert.equal(await readUntilClosed(conn, 3000), "");
  assert.ok(performance.now() - started >= 150, "not before its deadline");
});

Deno.test("serveGuarded closes a connection trickling its head past the deadline", async () => {
  await using server = start({ headersTimeoutMs: 300 });
  const conn = await server.connect();
  await conn.write(encoder.encode("POST / HTTP/1.1\r\n"));
  const trickle = setInterval(() => conn.write(encoder.encode("x-a: b\r\n")).catch(() => {}), 50);
  try {
    assert.equal(await readUntilClosed(conn, 3000), "");
  } finally {
    clearInterval(trickle);
  }
});

Deno.test("serveGuarded answers requests and closes the keep-alive connection once idle", async () => {
  await using server = start({ headersTimeoutMs: 5000, keepAliveTimeoutMs: 200 });
  const conn = await server.connect();
  await conn.write(encoder.encode("GET / HTTP/1.1\r\nhost: x\r\n\r\n"));
  const text = await readUntilClosed(conn, 3000);
  assert.match(text, /^HTTP\/1\.1 200 OK/);
  assert.match(text, /ok$/);
});

Deno.test("serveGuarded passes the connection's address to the handler", async () => {
  await using server = start({}, (_request, info) => new Response(info.remoteAddr.hostname));
  const response = await fetch(`http://127.0.0.1:${server.addr.port}/`);
  assert.equal(await response.text(), "127.0.0.1");
});

Deno.test("serveGuarded at its bound closes the longest-waiting connection for a newcomer", async () => {
  await using server = start({ headersTimeoutMs: 10_000, maxConnections: 3 });
  const idle = [await server.connect(), await server.connect(), await server.connect()];
  const { waitFor } = await import("./tests/helpers/wait.ts");
  await waitFor(() => server.stats().connections === 3);
  const response = await fetch(`http://127.0.0.1:${server.addr.port}/`);
  assert.equal(await response.text(), "ok", "the newcomer is served");
  assert.equal(await readUntilClosed(idle[0], 3000), "", "the oldest idle one was closed");
  for (const conn of idle.slice(1)) conn.close();
});

Deno.test("serveGuarded at its bound takes room from the address holding the most connections", async () => {
  const { waitFor } = await import("./tests/helpers/wait.ts");
  await using server = start({ headersTimeoutMs: 10_000, maxConnections: 3 });
  const visitor = await server.connect();
  await waitFor(() => server.stats().connections === 1);
  const { closed, sockets: flood } = await idleFlood(server.addr.port, "127.0.0.2", [
    "first",
    "second",
  ]);
  await waitFor(() => server.stats().connections === 3);
  const response = await fetch(`http://127.0.0.1:${server.addr.port}/`);
  assert.equal(await response.text(), "ok");
  await waitFor(() => closed.length === 1);
  assert.deepEqual(closed, ["first"], "the flooding address gave up its oldest");
  assert.equal(server.stats().connections >= 3, true, "the visitor's idle connection stayed");
  flood.forEach((socket) => socket.destroy());
  visitor.close();
});

Deno.test("serveGuarded at its bound passes over an address whose connections are all busy, not to a lone visitor", async () => {
  const { waitFor } = await import("./tests/helpers/wait.ts");
  const release = Promise.withResolvers<void>();
  await using server = start({ headersTimeoutMs: 10_000, maxConnections: 5 }, async (request) => {
    if (new URL(request.url).pathname === "/busy") await release.promise;
    return new Response("ok");
  });
  using _ = { [Symbol.dispose]: () => release.resolve() };
  const visitor = await server.connect(); // 127.0.0.1, waiting longest
  await waitFor(() => server.stats().connections === 1);
  // Two busy connections from 127.0.0.2, then two idle ones from 127.0.0.3.
  using busyClient = Deno.createHttpClient({ localAddress: "127.0.0.2", poolMaxIdlePerHost: 0 });
  const busy = [0, 1].map(() =>
    fetch(`http://127.0.0.1:${server.addr.port}/busy`, { client: busyClient }).then((r) => r.text())
  );
  await waitFor(() => server.stats().connections === 3 && server.stats().waiting === 1);
  const { closed, sockets: flood } = await idleFlood(server.addr.port, "127.0.0.3", [
    "first",
    "second",
  ]);
  await waitFor(() => server.stats().connections === 5);
  const response = await fetch(`http://127.0.0.1:${server.addr.port}/`);
  assert.equal(await response.text(), "ok");
  await waitFor(() => closed.length === 1);
  assert.deepEqual(closed, ["first"], "127.0.0.3 gave up its oldest, not the visitor");
  release.resolve();
  assert.deepEqual(await Promise.all(busy), ["ok", "ok"]);
  flood.forEach((socket) => socket.destroy());
  visitor.close();
});

Deno.test("serveGuarded at its bound with every connection busy answers 503 with Retry-After", async () => {
  const release = Promise.withResolvers<void>();
  const { waitFor } = await import("./tests/helpers/wait.ts");
  await using server = start({ maxConnections: 2 }, async () => {
    await release.promise;
    return new Response("late");
  });
  // Whatever the assertions say, the handlers end, so the server can shut down.
  using _ = { [Symbol.dispose]: () => release.resolve() };
  const busy = [0, 1].map(() =>
    fetch(`http://127.0.0.1:${server.addr.port}/`, {
      headers: { connection: "close" },
    }).then((r) => r.text())
  );
  await waitFor(() => server.stats().connections === 2 && server.stats().waiting === 0);
  const refused = await fetch(`http://127.0.0.1:${server.addr.port}/`);
  assert.equal(refused.status, 503);
  assert.equal(refused.headers.get("retry-after"), "1");
  assert.equal((await refused.json()).error, "Server busy: try again later");
  release.resolve();
  assert.deepEqual(await Promise.all(busy), ["late", "late"]);
});

Deno.test("serveGuarded at its bound refuses room for a while to an address that just lost a connection for room", async () => {
  const { waitFor } = await import("./tests/helpers/wait.ts");
  await using server = start({ headersTimeoutMs: 10_000, maxConnections: 2 });
  const net = await import("node:net");
  /** An idle connection from `localAddress`, with what it received and whether it closed. */
  const open = (localAddress: string) => {
    const socket = net.connect({ port: server.addr.port, host: "127.0.0.1", localAddress });
    const seen = { data: "", closed: false };
    socket.on("data", (chunk) => seen.data += chunk.toString());
    socket.on("error", () => {});
    socket.on("close", () => seen.closed = true);
    return { socket, seen };
  };
  const first = open("127.0.0.2");
  await waitFor(() => server.stats().connections === 1);
  const second = open("127.0.0.3");
  await waitFor(() => server.stats().connections === 2);
  // A newcomer takes the room of the longest waiting, 127.0.0.2's.
  const visitor = open("127.0.0.4");
  await waitFor(() => first.seen.closed, { message: "127.0.0.2 lost its connection" });
  // 127.0.0.2 comes back at once: refused, though 127.0.0.3 holds one as it did.
  const back = open("127.0.0.2");
  await waitFor(() => back.seen.closed, { message: "the returning address was refused" });
  assert.match(back.seen.data, /^HTTP\/1\.1 503 /);
  assert.equal(second.seen.closed, false);
  assert.equal(visitor.seen.closed, false);
  // Another address still may take room.
  const other = open("127.0.0.5");
  await waitFor(() => second.seen.closed, { message: "127.0.0.3 gave way to 127.0.0.5" });
  assert.equal(other.seen.closed, false);
  for (const { socket } of [second, visitor, other]) socket.destroy();
});
