/**
 * bench:smtp-distance — the SMTP connector against a relay a round trip away: a local
 * smtp-server (plaintext, AUTH, messages discarded) behind a TCP proxy in this process
 * that holds every chunk BENCH_RTT_MS / 2 (20 ms: 10 each way) before passing it on, in
 * order. BENCH_MESSAGES (600) messages, BENCH_AT_ONCE (60) at a time, through one
 * connector, so messages wait for the relay's sessions as they do behind a burst. Prints
 * messages a second and the sessions the relay saw, best of two runs after a warm-up.
 *
 *     deno task bench:smtp-distance
 *
 * @module
 */
import { createSmtpConnector, type SmtpRelayConfig } from "../connectors/smtp.ts";
import type { SubmissionEnvelope } from "../submission.ts";
import { startSmtpServer } from "../tests/helpers/smtp_server.ts";

const RTT_MS = Number(Deno.env.get("BENCH_RTT_MS") ?? "20");
const MESSAGES = Number(Deno.env.get("BENCH_MESSAGES") ?? "600");
const AT_ONCE = Number(Deno.env.get("BENCH_AT_ONCE") ?? "60");
const LOGIN = { username: "bench-user", password: "bench-password" };

const server = await startSmtpServer({ mode: "off", ...LOGIN, discard: true });

/** Passes bytes from `from` to `to`, each chunk `delayMs` later, in order. */
async function delayed(from: Deno.Conn, to: Deno.Conn, delayMs: number): Promise<void> {
  let previous = Promise.resolve();
  try {
    for await (const chunk of from.readable) {
      const due = performance.now() + delayMs;
      previous = previous.then(async () => {
        const wait = due - performance.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        await to.write(chunk).catch(() => {});
      });
    }
  } catch { /* a side hung up */ }
  await previous;
  try {
    to.close();
  } catch { /* closed already */ }
}

const proxy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
(async () => {
  for await (const client of proxy) {
    Deno.connect({ hostname: "127.0.0.1", port: server.port }).then((upstream) => {
      delayed(client, upstream, RTT_MS / 2);
      delayed(upstream, client, RTT_MS / 2);
    }, () => client.close());
  }
})();

const config: SmtpRelayConfig = {
  host: "127.0.0.1",
  port: (proxy.addr as Deno.NetAddr).port,
  secureTransport: "off",
  ...LOGIN,
  from: "forms@tenant.example",
  to: ["owner@tenant.example"],
  subjectTemplate: "New submission: {{formName}}",
};

function envelope(i: number): SubmissionEnvelope {
  return {
    submissionId: crypto.randomUUID(),
    formId: "form-bench",
    formName: "Contact form",
    payload: { name: `Visitor ${i}`, email: `visitor${i}@example.org`, message: "Hello" },
    metadata: {
      origin: "https://www.example.org",
      ip: "203.0.113.7",
      userAgent: "Mozilla/5.0",
      referer: null,
      submittedAt: new Date().toISOString(),
    },
  };
}

/** Messages a second for `count` messages, AT_ONCE at a time, through a fresh connector. */
async function run(count: number): Promise<{ rate: number; sessions: number }> {
  const connector = createSmtpConnector({
    platform: null,
    heloName: "bench.formrelay.test",
    timeoutMs: 60_000,
  });
  const connectionsBefore = server.connections;
  const signal = new AbortController().signal;
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: AT_ONCE }, async () => {
    while (next < count) {
      const e = envelope(next++);
      await connector.deliver({
        envelope: e,
        config,
        deliveryId: e.submissionId,
        destinationId: "dest-bench",
        signal,
      });
    }
  }));
  const rate = count / ((performance.now() - start) / 1000);
  connector.close();
  return { rate, sessions: server.connections - connectionsBefore };
}

await run(100);
const runs = [await run(MESSAGES), await run(MESSAGES)];
const best = runs.reduce((a, b) => (b.rate > a.rate ? b : a));
console.log(
  `bench:smtp-distance — ${MESSAGES} messages, ${AT_ONCE} at a time, relay ${RTT_MS} ms away: ` +
    `${best.rate.toFixed(0)} messages/s (runs ${runs.map((r) => r.rate.toFixed(0)).join(", ")}), ` +
    `${best.sessions} sessions (${new Date().toISOString().slice(0, 10)}, ` +
    `${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno})`,
);
proxy.close();
await server.close();
