/**
 * SMTP throughput: formrelay's connector against nodemailer, both sending the same
 * 500 messages (Variant A layout: from, to, subject, the labelled plain text) to
 * the same local smtp-server over STARTTLS with AUTH LOGIN, in the same run.
 *
 * The server runs in a child process so it does not share the client's thread.
 *
 *     deno task bench:smtp [--messages=500] [--mode=starttls|on|off]
 *
 * @module
 */
import { nodemailer } from "../tests/deps.ts";
import { createSmtpConnector, type SmtpRelayConfig } from "../connectors/smtp.ts";
import { buildMessage } from "../connectors/smtp/message.ts";
import type { SubmissionEnvelope } from "../store/envelope.ts";
import { testCertificates } from "../tests/helpers/certs.ts";
import { startSmtpServer } from "../tests/helpers/smtp_server.ts";

const USERNAME = "bench-user";
const PASSWORD = "bench-pässword";

function option(name: string, fallback: string): string {
  const arg = Deno.args.find((a) => a.startsWith(`--${name}=`));
  return arg ? arg.slice(name.length + 3) : fallback;
}

const mode = option("mode", "starttls") as SmtpRelayConfig["secureTransport"];

if (Deno.args.includes("--server")) {
  // Child process: serve until stdin closes; print the port as the first line.
  const certs = await testCertificates();
  const server = await startSmtpServer({
    mode,
    certs,
    username: USERNAME,
    password: PASSWORD,
    discard: true,
  });
  console.log(JSON.stringify({ port: server.port, ca: certs.ca }));
  for await (const _ of Deno.stdin.readable) {
    // Wait for the parent to close stdin.
  }
  await server.close();
  Deno.exit(0);
}

const total = Number(option("messages", "500"));

function envelope(i: number): SubmissionEnvelope {
  return {
    submissionId: crypto.randomUUID(),
    formId: "form-bench",
    formName: "Contact form",
    payload: {
      name: `Visitor ${i}`,
      email: `visitor${i}@example.org`,
      message: "Hello, I would like to know more about your product. ".repeat(8),
      consent: true,
    },
    metadata: {
      origin: "https://www.example.org",
      ip: "203.0.113.7",
      userAgent: "Mozilla/5.0",
      referer: null,
      submittedAt: new Date().toISOString(),
    },
  };
}

async function runPool<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await work(items[next++]);
    }),
  );
}

async function main() {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", import.meta.filename!, "--server", `--mode=${mode}`],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let first = "";
  while (!first.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("The server process ended early");
    first += value;
  }
  reader.releaseLock();
  const { port, ca } = JSON.parse(first.slice(0, first.indexOf("\n")));

  const config: SmtpRelayConfig = {
    host: "localhost",
    port,
    secureTransport: mode,
    username: USERNAME,
    password: PASSWORD,
    from: "forms@tenant.example",
    to: ["owner@tenant.example"],
    subjectTemplate: "New submission: {{formName}}",
  };
  const envelopes = Array.from({ length: total }, (_, i) => envelope(i));
  const results: string[] = [];
  // nodemailer's input, prepared outside the timed runs: the same text formrelay sends.
  const prepared = new Map<SubmissionEnvelope, { text: string; messageId: string }>();
  for (const e of envelopes) {
    const built = buildMessage(e, {
      layout: "plain",
      from: config.from,
      to: config.to,
      subjectTemplate: config.subjectTemplate,
      destinationId: "dest-bench",
    });
    const body = built.data.slice(built.data.indexOf("\r\n\r\n") + 4);
    prepared.set(e, { text: decodeQuotedPrintable(body), messageId: built.messageId });
  }

  try {
    for (const concurrency of [1, 8]) {
      const connector = createSmtpConnector({
        platform: null,
        heloName: "bench.formrelay.test",
        timeoutMs: 60_000,
        caCerts: [ca],
      });
      const transport = nodemailer.createTransport({
        host: "localhost",
        port,
        secure: mode === "on",
        requireTLS: mode === "starttls",
        ignoreTLS: mode === "off",
        auth: { user: USERNAME, pass: PASSWORD },
        authMethod: "LOGIN",
        name: "bench.formrelay.test",
        tls: { ca: [ca] },
        pool: true,
        maxConnections: concurrency,
        maxMessages: Infinity,
      });
      const signal = new AbortController().signal;
      const formrelay = async (e: SubmissionEnvelope) => {
        await connector.deliver({
          envelope: e,
          config,
          deliveryId: e.submissionId,
          destinationId: "dest-bench",
          signal,
        });
      };
      // nodemailer composes the same content itself: subject, Message-ID and plain text.
      const viaNodemailer = async (e: SubmissionEnvelope) => {
        const { text, messageId } = prepared.get(e)!;
        await transport.sendMail({
          from: config.from,
          to: config.to,
          subject: `New submission: ${e.formName}`,
          messageId,
          text,
          textEncoding: "quoted-printable",
        });
      };
      const time = async (send: (e: SubmissionEnvelope) => Promise<void>) => {
        const start = performance.now();
        await runPool(envelopes, concurrency, send);
        return total / ((performance.now() - start) / 1000);
      };
      // Warm up both (connections, TLS, JIT), then measure in alternating order.
      await runPool(envelopes.slice(0, 20), concurrency, formrelay);
      await runPool(envelopes.slice(0, 20), concurrency, viaNodemailer);
      const ours = [await time(formrelay)];
      const theirs = [await time(viaNodemailer)];
      theirs.push(await time(viaNodemailer));
      ours.push(await time(formrelay));
      const a = Math.max(...ours);
      const b = Math.max(...theirs);
      const line = `concurrency ${concurrency}: formrelay ${a.toFixed(0)} msg/s, ` +
        `nodemailer ${b.toFixed(0)} msg/s, ratio ${(a / b).toFixed(2)}`;
      console.log(line);
      results.push(line);
      connector.close();
      transport.close();
    }
  } finally {
    await child.stdin.close();
    await child.status;
  }
  console.log(
    `\n${total} messages each, mode ${mode}, best of 2 runs, ${navigator.hardwareConcurrency} cores, ` +
      `Deno ${Deno.version.deno}, ${new Date().toISOString().slice(0, 10)}`,
  );
}

/** Undoes quoted-printable for the benchmark's plain text (ASCII and UTF-8). */
function decodeQuotedPrintable(text: string): string {
  const bytes: number[] = [];
  const joined = text.replace(/=\r\n/g, "");
  for (let i = 0; i < joined.length; i++) {
    if (joined[i] === "=" && /^[0-9A-F]{2}$/.test(joined.slice(i + 1, i + 3))) {
      bytes.push(parseInt(joined.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(joined.charCodeAt(i));
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

await main();
