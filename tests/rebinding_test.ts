/**
 * Connect where the guard checked (DNS rebinding). The guard's resolver is injected: it
 * answers a public-looking address at one look-up and loopback at the next (and the
 * reverse). With private destinations not allowed, no webhook, script web app hop or SMTP
 * connection may reach a loopback listener, whatever the order. The host name is one the
 * system itself resolves to loopback (from /etc/hosts), so a connection that resolved the
 * name again instead of using the approved address would reach the listener as well.
 * The pinned path must still deliver, reuse its connections and verify TLS on the name.
 */
import assert from "node:assert/strict";
import {
  deliveryFailure,
  deliveryRequest,
  ENVELOPE,
  httpDeps,
  loopbackGuard,
  startSink,
} from "./helpers/connector_sink.ts";
import { createHttpTransport } from "../connectors/http_transport.ts";
import { createOutboundGuard, type OutboundGuard } from "../connectors/outbound_guard.ts";
import { createSheetsWebhookConnector } from "../connectors/sheets_webhook.ts";
import { createSmtpConnector, type SmtpRelayConfig } from "../connectors/smtp.ts";
import { createWebhookConnector, type WebhookConfig } from "../connectors/webhook.ts";
import { testCertificates } from "./helpers/certs.ts";
import { startSmtpServer } from "./helpers/smtp_server.ts";

/** Global unicast, so the guard allows it, but routed nowhere: connecting to it fails. */
const PUBLIC_LOOKING = "3ffe::1";
const LOOPBACK = "127.0.0.1";

type Order = "public first" | "loopback first";

/** A resolver whose first look-up (A and AAAA) answers one address and later ones the other. */
function rebindingResolver(order: Order) {
  const calls = { A: 0, AAAA: 0 };
  const resolve = (_hostname: string, type: "A" | "AAAA"): Promise<string[]> => {
    const first = ++calls[type] === 1;
    const publicNow = first === (order === "public first");
    if (type === "A" && !publicNow) return Promise.resolve([LOOPBACK]);
    if (type === "AAAA" && publicNow) return Promise.resolve([PUBLIC_LOOKING]);
    return Promise.reject(new Deno.errors.NotFound("no records"));
  };
  return { resolve, lookups: () => calls.A };
}

/** A name the system resolves to 127.x besides localhost (from /etc/hosts), else a made-up one. */
function systemLoopbackName(): string {
  try {
    for (const line of Deno.readTextFileSync("/etc/hosts").split("\n")) {
      const [address, ...names] = line.replace(/#.*/, "").trim().split(/\s+/);
      if (!address.startsWith("127.")) continue;
      const name = names.find((n) => n !== "localhost" && !n.endsWith(".localhost"));
      if (name !== undefined) return name;
    }
  } catch { /* no hosts file */ }
  return "rebinding.test";
}

/** Counts connections to any loopback address on one port. */
function startCanary() {
  const listener = Deno.listen({ hostname: "0.0.0.0", port: 0 });
  let hits = 0;
  const accepting = (async () => {
    try {
      for await (const conn of listener) {
        hits++;
        conn.close();
      }
    } catch { /* closed */ }
  })();
  return {
    port: listener.addr.port,
    hits: () => hits,
    async close() {
      listener.close();
      await accepting;
    },
  };
}

const NAME = systemLoopbackName();
const ORDERS: Order[] = ["public first", "loopback first"];

/** The failure of the first delivery of each order: unreachable, or refused by the guard. */
function assertFirstFailure(order: Order, error: { permanent: boolean; message: string }) {
  if (order === "public first") assert.equal(error.permanent, false, error.message);
  else assert.match(error.message, /Destination address is not allowed: .*loopback/);
}

Deno.test("webhook connections go to the address the guard approved, never to a second look-up", async (t) => {
  const canary = startCanary();
  try {
    for (const order of ORDERS) {
      await t.step(order, async () => {
        const resolver = rebindingResolver(order);
        const guard = createOutboundGuard({ allowPrivate: false, resolve: resolver.resolve });
        const deps = httpDeps(1_000, guard);
        const webhook = createWebhookConnector(deps);
        try {
          const url = `http://${NAME}:${canary.port}/hook`;
          const first = await deliveryFailure(() =>
            webhook.deliver(deliveryRequest({ url, method: "POST", headers: {} }))
          );
          assertFirstFailure(order, first);
          const second = await deliveryFailure(() =>
            webhook.deliver(deliveryRequest({ url, method: "POST", headers: {} }))
          );
          if (order === "public first") assert.match(second.message, /loopback/);
          assert.ok(resolver.lookups() >= 1, "the guard resolved the name");
          assert.equal(canary.hits(), 0, "a connection reached loopback");
        } finally {
          deps.transport.close();
        }
      });
    }
  } finally {
    await canary.close();
  }
});

Deno.test("every script web app redirect hop connects where the guard approved", async (t) => {
  const canary = startCanary();
  await using sink = startSink((request) => {
    const port = request.url.port;
    const next = request.url.pathname === "/exec"
      ? `http://hop.test:${port}/second`
      : `http://${NAME}:${canary.port}/third`;
    return new Response(null, { status: 302, headers: { location: next } });
  });
  try {
    for (const order of ORDERS) {
      await t.step(order, async () => {
        const resolver = rebindingResolver(order);
        const strict = createOutboundGuard({ allowPrivate: false, resolve: resolver.resolve });
        // The sink stands in for the public first and second hops.
        const guard: OutboundGuard = {
          allowAll: false,
          approve: (hostname) =>
            hostname === LOOPBACK || hostname === "hop.test"
              ? Promise.resolve([LOOPBACK])
              : strict.approve(hostname),
        };
        const deps = httpDeps(1_000, guard);
        const sheets = createSheetsWebhookConnector(deps);
        const before = sink.requests.length;
        try {
          const error = await deliveryFailure(() =>
            sheets.deliver(deliveryRequest({ url: `${sink.origin}/exec`, method: "POST" }))
          );
          assertFirstFailure(order, error);
          const hops = sink.requests.slice(before);
          assert.deepEqual(hops.map((r) => r.url.pathname), ["/exec", "/second"]);
          assert.equal(hops[1].headers.get("host"), `hop.test:${new URL(sink.origin).port}`);
          assert.equal(resolver.lookups(), 1);
          assert.equal(canary.hits(), 0, "a connection reached loopback");
        } finally {
          deps.transport.close();
        }
      });
    }
  } finally {
    await canary.close();
  }
});

Deno.test("SMTP connects to the address the guard approved, in every TLS mode", async (t) => {
  const canary = startCanary();
  try {
    for (const order of ORDERS) {
      for (const secureTransport of ["off", "starttls", "on"] as const) {
        await t.step(`${order}, ${secureTransport}`, async () => {
          const resolver = rebindingResolver(order);
          const smtp = createSmtpConnector({
            platform: null,
            heloName: "relay.test",
            timeoutMs: 1_000,
            guard: createOutboundGuard({ allowPrivate: false, resolve: resolver.resolve }),
          });
          const config: SmtpRelayConfig = {
            host: NAME,
            port: canary.port,
            secureTransport,
            username: "u",
            password: "p",
            from: "forms@tenant.example",
            to: ["owner@tenant.example"],
            subjectTemplate: "x",
          };
          try {
            const first = await deliveryFailure(() => smtp.deliver(deliveryRequest(config)));
            assertFirstFailure(order, first);
            const second = await deliveryFailure(() => smtp.deliver(deliveryRequest(config)));
            if (order === "public first") assert.match(second.message, /loopback/);
            assert.equal(canary.hits(), 0, "a connection reached loopback");
          } finally {
            smtp.close();
          }
        });
      }
    }
  } finally {
    await canary.close();
  }
});

Deno.test("a pinned webhook delivers by name and reuses its connection", async () => {
  await using sink = startSink(() => new Response("ok"));
  const { guard, approved } = loopbackGuard();
  const deps = httpDeps(5_000, guard);
  const webhook = createWebhookConnector(deps);
  const port = new URL(sink.origin).port;
  try {
    for (let i = 0; i < 3; i++) {
      const receipt = await webhook.deliver(deliveryRequest({
        url: `http://hooks.test:${port}/in?token=t`,
        method: "PUT",
        headers: { "x-extra": "1" },
      }));
      assert.equal(receipt.statusCode, 200);
    }
    assert.equal(sink.requests.length, 3);
    const request = sink.requests[0];
    assert.equal(request.method, "PUT");
    assert.equal(request.url.pathname + request.url.search, "/in?token=t");
    assert.equal(request.headers.get("host"), `hooks.test:${port}`);
    assert.equal(request.headers.get("content-type"), "application/json");
    assert.equal(request.headers.get("x-extra"), "1");
    assert.equal(request.headers.get("webhook-id"), "dlv_0123456789abcdef");
    assert.deepEqual(JSON.parse(request.body), ENVELOPE);
    assert.deepEqual(approved, ["hooks.test"], "one look-up for three deliveries");
  } finally {
    deps.transport.close();
  }
});

Deno.test("pinned HTTPS and SMTP verify the certificate against the name, not the address", async (t) => {
  const certs = await testCertificates();
  const controller = new AbortController();
  const server = Deno.serve({
    hostname: LOOPBACK,
    port: 0,
    cert: certs.cert,
    key: certs.key,
    signal: controller.signal,
    onListen() {},
  }, () => new Response(null, { status: 204 }));
  const { guard, approved } = loopbackGuard();
  const transport = createHttpTransport(guard, { caCerts: [certs.ca] });
  const webhook = createWebhookConnector({ timeoutMs: 5_000, transport });
  const smtpServer = await startSmtpServer({ mode: "starttls", certs });
  const smtp = createSmtpConnector({
    platform: null,
    heloName: "relay.test",
    timeoutMs: 5_000,
    caCerts: [certs.ca],
    guard,
  });
  try {
    const hook = (host: string): WebhookConfig => ({
      url: `https://${host}:${server.addr.port}/in`,
      method: "POST",
      headers: {},
    });
    await t.step("HTTPS to the certificate's name is delivered", async () => {
      const receipt = await webhook.deliver(deliveryRequest(hook("localhost")));
      assert.equal(receipt.statusCode, 204);
    });
    await t.step("HTTPS to another name at the same address is refused", async () => {
      const error = await deliveryFailure(() =>
        webhook.deliver(deliveryRequest(hook("pinned.test")))
      );
      assert.equal(error.permanent, false);
      assert.match(
        error.message,
        /^Cannot deliver to "https:\/\/pinned\.test:\d+": .*(certificate|altnames)/i,
      );
    });
    const relay = (host: string): SmtpRelayConfig => ({
      host,
      port: smtpServer.port,
      secureTransport: "starttls",
      username: "relay-user",
      password: "relay-pässword",
      from: "forms@tenant.example",
      to: ["owner@tenant.example"],
      subjectTemplate: "x",
    });
    await t.step("SMTP STARTTLS to the certificate's name is delivered", async () => {
      const receipt = await smtp.deliver(deliveryRequest(relay("localhost")));
      assert.equal(receipt.statusCode, 250);
      assert.equal(smtpServer.messages.length, 1);
    });
    await t.step("SMTP STARTTLS to another name at the same address is refused", async () => {
      const error = await deliveryFailure(() => smtp.deliver(deliveryRequest(relay("mail.test"))));
      assert.match(error.message, /certificate/i);
      assert.equal(smtpServer.messages.length, 1);
    });
    assert.ok(approved.includes("pinned.test") && approved.includes("mail.test"), approved.join());
  } finally {
    smtp.close();
    transport.close();
    await smtpServer.close();
    controller.abort();
    await server.finished;
  }
});
