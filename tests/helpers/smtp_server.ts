import { concatBytes } from "../../bytes.ts";
/**
 * A real SMTP server for tests and benchmarks: npm `smtp-server` on loopback,
 * port 0, in plaintext, STARTTLS or implicit-TLS mode, checking AUTH credentials
 * (LOGIN and PLAIN offered, or the mechanisms a test names) and capturing every
 * message it accepts.
 *
 * @module
 */
import { SMTPServer, type SMTPServerOptions } from "../deps.ts";
import type { TestCertificates } from "./certs.ts";

/** A message the server accepted. */
export interface CapturedMessage {
  /** MAIL FROM address. */
  from: string;
  /** RCPT TO addresses that were accepted. */
  to: string[];
  /** The message as received, dot-unstuffed, CRLF line endings. */
  raw: string;
  /** Authenticated user. */
  user: string | undefined;
  /** True when the session was TLS-protected. */
  secure: boolean;
  /** The name the client gave with EHLO. */
  heloName: string;
  /** Epoch ms when the message's data had arrived (before the server's 250). */
  receivedAt: number;
  /** True when MAIL FROM asked for SMTPUTF8 (RFC 6531). */
  smtpUtf8: boolean;
}

/** Options of {@linkcode startSmtpServer}. */
export interface SmtpServerOptions {
  /** `off`: plaintext; `starttls`: plaintext with STARTTLS; `on`: TLS from the first byte. */
  mode: "off" | "starttls" | "on";
  /** Needed for `starttls` and `on`. */
  certs?: TestCertificates;
  username?: string;
  password?: string;
  /** SASL mechanisms offered after EHLO (default LOGIN and PLAIN); only TLS or `off` shows them. */
  authMethods?: string[];
  /** With `starttls`: the mechanisms offered before the upgrade, `authMethods` after it. */
  authMethodsBeforeTls?: string[];
  /** Reply codes for recipients the server refuses, by address. */
  rejectRecipients?: Record<string, number>;
  /** Refuse every MAIL FROM with this code and text of the server's own. */
  refuseMail?: { code: number; text: string };
  /** Leave STARTTLS out of the EHLO reply (for the downgrade test). */
  hideStartTls?: boolean;
  /** Leave SMTPUTF8 out of the EHLO reply (a relay that cannot take addresses that are not ASCII). */
  hideSmtpUtf8?: boolean;
  /** A message whose text contains this is refused with 554 at its final dot, and not kept. */
  refuseMessagesWith?: string;
  /** Keep no messages (benchmarks). */
  discard?: boolean;
  /** Idle time after which the server says 421 and hangs up (smtp-server default 60 s). */
  socketTimeoutMs?: number;
  /** Connections at once past which a new one is answered 421 (smtp-server's maxClients). */
  maxClients?: number;
  /** How long the server takes over each message's data before its 250. */
  messageDelayMs?: number;
}

/** A running server; `close()` it at the end of the test. */
export interface TestSmtpServer {
  hostname: string;
  port: number;
  /** Messages accepted so far, in order. */
  messages: CapturedMessage[];
  /** Number of messages accepted (also counted when discarded). */
  readonly received: number;
  /** Connections accepted so far. */
  readonly connections: number;
  /** Connections ended so far (by either side). */
  readonly closedConnections: number;
  /** The most sessions that were open at once (connections past maxClients not counted). */
  readonly maxOpen: number;
  /** Successful and failed logins so far. */
  readonly logins: { ok: number; failed: number };
  /** The mechanism of each login attempt so far, in order (`LOGIN`, `PLAIN`). */
  readonly authMethodsUsed: string[];
  /** Resolves once `count` messages arrived; rejects after `timeoutMs`. */
  waitForMessages(count: number, timeoutMs?: number): Promise<void>;
  /** Resolves once `count` connections have ended; rejects after `timeoutMs`. */
  waitForClosed(count: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** Starts the server on 127.0.0.1 with an OS-assigned port. */
export async function startSmtpServer(options: SmtpServerOptions): Promise<TestSmtpServer> {
  const username = options.username ?? "relay-user";
  const password = options.password ?? "relay-pässword";
  const messages: CapturedMessage[] = [];
  const waiters = new Set<() => void>();
  let received = 0;
  let connections = 0;
  let closedConnections = 0;
  let open = 0;
  let maxOpen = 0;
  const logins = { ok: 0, failed: 0 };
  const authMethodsUsed: string[] = [];

  const authMethods = options.authMethods ?? ["LOGIN", "PLAIN"];
  const serverOptions: SMTPServerOptions = {
    name: "localhost",
    banner: "formrelay test server",
    disableReverseLookup: true,
    logger: false,
    secure: options.mode === "on",
    hideSTARTTLS: options.mode === "off" || options.hideStartTls === true,
    hideSMTPUTF8: options.hideSmtpUtf8 === true,
    allowInsecureAuth: options.mode === "off" || options.hideStartTls === true,
    authMethods,
    size: 10 * 1024 * 1024,
    closeTimeout: 100,
    ...(options.socketTimeoutMs ? { socketTimeout: options.socketTimeoutMs } : {}),
    ...(options.maxClients ? { maxClients: options.maxClients } : {}),
    ...(options.certs ? { key: options.certs.key, cert: options.certs.cert } : {}),
    onConnect(_session, callback) {
      connections++;
      open++;
      maxOpen = Math.max(maxOpen, open);
      // smtp-server reads its options at each EHLO: the list shown follows the TLS state.
      if (options.authMethodsBeforeTls) serverOptions.authMethods = options.authMethodsBeforeTls;
      callback();
    },
    onSecure(_socket, _session, callback) {
      serverOptions.authMethods = authMethods;
      callback();
    },
    onClose(session) {
      closedConnections++;
      // Only sessions that were let in (onConnect) have a transaction count.
      if (session.transaction !== undefined) open--;
      for (const wake of waiters) wake();
    },
    onAuth(auth, _session, callback) {
      authMethodsUsed.push(auth.method);
      if (auth.username === username && auth.password === password) {
        logins.ok++;
        callback(null, { user: auth.username });
      } else {
        logins.failed++;
        callback(withCode(new Error("Invalid username or password"), 535));
      }
    },
    onMailFrom(_address, _session, callback) {
      const refusal = options.refuseMail;
      if (refusal === undefined) callback();
      else callback(withCode(new Error(refusal.text), refusal.code));
    },
    onRcptTo(address, _session, callback) {
      const code = options.rejectRecipients?.[address.address];
      if (code === undefined) callback();
      else callback(withCode(new Error(`Recipient ${address.address} not accepted`), code));
    },
    onData(stream, session, callback) {
      const chunks: Uint8Array[] = [];
      stream.on("data", (chunk: Uint8Array) => {
        if (!options.discard) chunks.push(chunk);
      });
      stream.on("end", () => {
        const refuse = options.refuseMessagesWith;
        if (refuse && new TextDecoder().decode(concatBytes(chunks)).includes(refuse)) {
          return callback(withCode(new Error("Message refused"), 554));
        }
        received++;
        if (!options.discard) {
          messages.push({
            from: session.envelope.mailFrom ? session.envelope.mailFrom.address : "",
            to: session.envelope.rcptTo.map((r) => r.address),
            raw: new TextDecoder().decode(concatBytes(chunks)),
            user: session.user as string | undefined,
            secure: session.secure,
            heloName: session.hostNameAppearsAs,
            receivedAt: Date.now(),
            smtpUtf8: session.envelope.smtpUtf8 === true,
          });
        }
        for (const wake of waiters) wake();
        if (options.messageDelayMs) {
          setTimeout(() => callback(null, "Message queued"), options.messageDelayMs);
        } else callback(null, "Message queued");
      });
    },
  };
  function waitUntil(done: () => boolean, timeoutMs: number, why: () => string): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const wake = () => {
        if (!done()) return;
        waiters.delete(wake);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        waiters.delete(wake);
        reject(new Error(why()));
      }, timeoutMs);
      waiters.add(wake);
    });
  }

  const server = new SMTPServer(serverOptions);
  server.on("error", () => {
    // Client-side disconnects in failure tests are expected.
  });
  await new Promise<void>((resolve, reject) => {
    server.server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.server.address();
  if (address === null || typeof address === "string") throw new Error("No server address");

  return {
    hostname: "127.0.0.1",
    port: address.port,
    messages,
    get received() {
      return received;
    },
    get connections() {
      return connections;
    },
    get closedConnections() {
      return closedConnections;
    },
    get maxOpen() {
      return maxOpen;
    },
    get logins() {
      return { ...logins };
    },
    get authMethodsUsed() {
      return [...authMethodsUsed];
    },
    waitForMessages(count, timeoutMs = 5000) {
      return waitUntil(
        () => received >= count,
        timeoutMs,
        () => `Expected ${count} messages within ${timeoutMs} ms, got ${received}`,
      );
    },
    waitForClosed(count, timeoutMs = 5000) {
      return waitUntil(
        () => closedConnections >= count,
        timeoutMs,
        () =>
          `Expected ${count} closed connections within ${timeoutMs} ms, got ${closedConnections}`,
      );
    },
    close() {
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function withCode(error: Error, responseCode: number): Error {
  return Object.assign(error, { responseCode });
}

/** The platform relay settings (PLATFORM_SMTP_*) of a test server started with user `relay`. */
export function platformRelayOf(server: TestSmtpServer) {
  return {
    host: server.hostname,
    port: server.port,
    secureTransport: "off" as const,
    username: "relay",
    password: "relay-pass",
    fromEmail: "forms@platform.example",
  };
}
