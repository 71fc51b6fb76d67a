/**
 * A minimal SMTP submission client over raw TCP (spec 6.4-6.6): greeting, EHLO,
 * STARTTLS, EHLO again, AUTH, then MAIL FROM / RCPT TO / DATA for as many messages
 * as the caller sends on the connection, and QUIT.
 *
 * AUTH uses a mechanism the server offers in its (last) EHLO reply: LOGIN, the spec's,
 * where offered, else PLAIN (RFC 4616); a server offering neither is a permanent
 * error naming what it offers.
 *
 * Every wait is bounded twice: by its own time-out (connect, greeting, command)
 * and by the deadline of the caller's conversation. A time-out or an abort closes
 * the socket, which ends any pending read or write.
 *
 * @module
 */

import { concatBytes } from "../../bytes.ts";

/** Where and how to connect and log in. */
export interface SmtpRelay {
  host: string;
  port: number;
  /** `on`: TLS from the first byte; `starttls`: upgrade required; `off`: plaintext. */
  secureTransport: "off" | "starttls" | "on";
  username: string;
  password: string;
}

/** Limits for the waits of one conversation, in milliseconds. */
export interface SmtpTimeouts {
  connectMs: number;
  greetingMs: number;
  /** Each command's reply, the reply after the final dot included. */
  commandMs: number;
}

/** Options of {@linkcode SmtpConnection.open}. */
export interface SmtpOpenOptions {
  /** The name sent with EHLO. */
  heloName: string;
  timeouts: SmtpTimeouts;
  /** Extra trusted CA certificates (PEM) for TLS. */
  caCerts?: string[];
  /**
   * The IP address to connect to (the one the outbound guard approved); the relay's
   * host name is then not resolved again, and TLS still verifies the certificate
   * against the name. Without it the connection resolves the name.
   */
  address?: string;
  /** The conversation ends with a time-out error at this time (epoch ms). */
  deadline: number;
  signal?: AbortSignal;
}

/** The per-use context of a pooled connection. */
export interface SmtpUseOptions {
  deadline: number;
  signal?: AbortSignal;
}

/** One server reply: its code and its text lines (code and separator removed). */
export interface SmtpReply {
  code: number;
  lines: string[];
}

/** A recipient the server refused, with its reply. */
export interface RejectedRecipient {
  address: string;
  reply: SmtpReply;
}

/** What {@linkcode SmtpConnection.send} reports for a message the server took. */
export interface SendResult {
  accepted: string[];
  rejected: RejectedRecipient[];
  /** The reply to the final dot. */
  reply: SmtpReply;
}

/** A message as the client sends it. */
export interface OutgoingMail {
  from: string;
  recipients: string[];
  /** The message with CRLF line endings; dot-stuffed by the client. */
  data: string;
}

/** A message ready for one session ({@linkcode SmtpConnection.prepare}). */
export interface PreparedMail {
  recipients: string[];
  /** Dot-stuffed, with the final dot. */
  data: Uint8Array;
  /** MAIL FROM, the RCPT TOs, and DATA when pipelined. */
  commands: string[];
}

/** Why a conversation failed. */
export type SmtpErrorKind = "reply" | "timeout" | "network" | "protocol" | "aborted" | "policy";

/** A failed conversation; `permanent` failures should not be retried. */
export class SmtpError extends Error {
  readonly kind: SmtpErrorKind;
  readonly permanent: boolean;
  /** The SMTP reply code, when a reply caused the failure. */
  readonly replyCode?: number;
  /** True when no transaction had started: retrying on a new connection is safe. */
  readonly beforeTransaction: boolean;
  /**
   * True when the server refused this message (its recipients, DATA or content) after
   * accepting the session and the sender: the message's fault, not the relay's.
   */
  readonly messageRefused: boolean;

  constructor(
    message: string,
    options: {
      kind: SmtpErrorKind;
      permanent: boolean;
      replyCode?: number;
      beforeTransaction?: boolean;
      messageRefused?: boolean;
      cause?: unknown;
    },
  ) {
    super(message, { cause: options.cause });
    this.name = "SmtpError";
    this.messageRefused = options.messageRefused ?? false;
    this.kind = options.kind;
    this.permanent = options.permanent;
    this.replyCode = options.replyCode;
    this.beforeTransaction = options.beforeTransaction ?? false;
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** Longest reply accepted, all lines together. */
const MAX_REPLY_BYTES = 64 * 1024;
const READ_CHUNK = 16 * 1024;
/** How long QUIT waits for its 221 before the socket is closed anyway. */
const QUIT_WAIT_MS = 1000;
/** Printable ASCII: an address that needs no SMTPUTF8. */
const ASCII = /^[\x20-\x7e]*$/;
/** SASL mechanisms spoken, in order of preference: LOGIN (the spec's), then PLAIN. */
const AUTH_MECHANISMS = ["LOGIN", "PLAIN"] as const;

/** An open, authenticated SMTP session. */
export class SmtpConnection {
  #conn: Deno.Conn;
  #buffer = new Uint8Array(0);
  #timeouts: SmtpTimeouts;
  #capabilities = new Map<string, string>();
  #deadline = Infinity;
  #signal: AbortSignal | undefined;
  #onAbort = () =>
    this.#fail(new SmtpError("delivery aborted", { kind: "aborted", permanent: false }));
  #failure: SmtpError | null = null;
  #closed = false;
  /** True between a 354 and the reply to the final dot: QUIT would be message text. */
  #inData = false;
  /** A next message's commands are on the wire, unread: QUIT could be its text too. */
  #commandsAhead = false;
  #stage = "the greeting";
  /** An SMTP greeting (any reply) came: failures before it are told apart by nobody. */
  #greeted = false;
  /** Where socket reads land (copied out at once): one buffer for the session's reads. */
  #readInto = new Uint8Array(READ_CHUNK);
  /**
   * The socket operation under way: when it times out (performance.now(); Infinity for
   * none), its own limit, and whether that time is the conversation's deadline. One
   * watchdog timer serves all of a session's operations (see #bounded): a timer set and
   * cleared per read and write cost more than the SMTP conversation's own code. Fields,
   * not an object an operation: a message takes half a dozen.
   */
  #pendingUntil = Infinity;
  #pendingLimitMs = 0;
  #pendingOverall = false;
  #watchdog: { timer: ReturnType<typeof setTimeout>; at: number } | null = null;

  private constructor(conn: Deno.Conn, timeouts: SmtpTimeouts) {
    this.#conn = conn;
    this.#timeouts = timeouts;
  }

  /**
   * Connects, reads the greeting, says EHLO, upgrades with STARTTLS when the mode
   * asks for it, and logs in with AUTH (LOGIN or PLAIN, as offered). Throws {@linkcode SmtpError}; the
   * socket is closed on failure.
   */
  static async open(relay: SmtpRelay, options: SmtpOpenOptions): Promise<SmtpConnection> {
    const { timeouts, signal } = options;
    const connectMs = Math.min(timeouts.connectMs, options.deadline - Date.now());
    const conn = await connectWithin(relay, options, connectMs).catch((error) => {
      throw noSmtpService(error);
    });
    const connection = new SmtpConnection(conn, timeouts);
    try {
      connection.use({ deadline: options.deadline, signal });
      if (relay.secureTransport === "on") {
        connection.#stage = "the TLS handshake";
        const tls = conn as Deno.TlsConn;
        await connection.#bounded(
          timeouts.greetingMs,
          () => tls.handshake(),
          "TLS handshake failed",
        );
      }
      await connection.#handshake(relay, options);
      return connection;
    } catch (error) {
      connection.close();
      throw connection.#greeted ? error : noSmtpService(error);
    }
  }

  /** Keywords of the last EHLO reply (upper case) and their parameters. */
  get capabilities(): ReadonlyMap<string, string> {
    return this.#capabilities;
  }

  /** True once the socket is closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Binds the connection to one conversation's deadline and abort signal. */
  use(options: SmtpUseOptions): void {
    this.release();
    this.#deadline = options.deadline;
    this.#signal = options.signal;
    if (options.signal?.aborted) this.#onAbort();
    options.signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** Unbinds the conversation set by {@linkcode use}. */
  release(): void {
    this.#signal?.removeEventListener("abort", this.#onAbort);
    this.#signal = undefined;
    this.#deadline = Infinity;
  }

  /**
   * A message ready to go on this session: its SMTPUTF8 need checked, its data encoded,
   * its commands listed. An address that is not ASCII (a visitor's `josé@…`) needs
   * SMTPUTF8 (RFC 6531): without it a relay would mangle or misroute it, so the message is
   * refused here, unsent (a permanent error).
   */
  prepare(mail: OutgoingMail): PreparedMail {
    if (!this.#utf8Allowed(mail)) {
      throw new SmtpError(
        "the relay does not offer SMTPUTF8, which an address that is not ASCII needs",
        { kind: "policy", permanent: true, messageRefused: true },
      );
    }
    const utf8 = needsUtf8(mail);
    const data = encodeData(mail.data);
    const params = (this.#capabilities.has("SIZE") ? ` SIZE=${data.length}` : "") +
      (utf8 ? " SMTPUTF8" : "");
    return {
      recipients: mail.recipients,
      data,
      // With PIPELINING, DATA may end the batch (RFC 2920 3.1): one round trip fewer.
      commands: [
        `MAIL FROM:<${mail.from}>${params}`,
        ...mail.recipients.map((address) => `RCPT TO:<${address}>`),
        ...(this.#pipelining() ? ["DATA"] : []),
      ],
    };
  }

  /**
   * Whether `mail` may have its commands written behind the message before it (send's
   * `next`): the server offers PIPELINING, and SMTPUTF8 when the addresses need it.
   */
  takesBehind(mail: OutgoingMail): boolean {
    return this.#pipelining() && this.#utf8Allowed(mail);
  }

  /**
   * Sends one message: MAIL FROM, one RCPT TO per recipient (pipelined when the
   * server offers PIPELINING), DATA, the dot-stuffed message and the final dot.
   * With `reused` (a pooled session), a failure of the first command, or a 421 to it,
   * says the session went stale with nothing sent (`beforeTransaction`). No RSET goes
   * first: a pooled session has ended its last transaction (a send that fails closes
   * its session), so the MAIL command is the liveness probe. Recipients the server
   * refuses are reported; the message goes to the others. Throws when all are refused
   * or any other step fails.
   *
   * With PIPELINING, `next` is asked once the server has said 354 for a message that
   * may follow: its commands go out in the same write as this message (RFC 2920 3.1
   * lets the message content start a group), and `written` then sends it on this
   * session without writing them again. A session that ends with such commands on the
   * wire is closed, never sent QUIT (it could be the next message's text).
   */
  async send(
    mail: OutgoingMail | PreparedMail,
    options: { reused?: boolean; written?: boolean; next?: () => PreparedMail | null } = {},
  ): Promise<SendResult> {
    const prepared = "commands" in mail ? mail : this.prepare(mail);
    const { recipients, data, commands } = prepared;
    const pipelining = this.#pipelining();
    if (options.written) this.#commandsAhead = false;
    const replies = await this.#batch(commands, options.reused === true, options.written === true);
    const mailReply = replies.shift()!;
    const recipientReplies = replies.splice(0, recipients.length);
    let dataReply = pipelining ? replies.shift() : undefined;
    // A server that said 354 anyway is waiting for a message: this session cannot go on.
    const abandon = () => {
      if (dataReply?.code === 354) this.#inData = true;
    };
    if (mailReply.code !== 250) {
      abandon();
      throw replyError("sender rejected", mailReply);
    }
    const accepted: string[] = [];
    const rejected: RejectedRecipient[] = [];
    recipients.forEach((address, i) => {
      const reply = recipientReplies[i];
      if (reply.code === 250 || reply.code === 251) accepted.push(address);
      else rejected.push({ address, reply });
    });
    if (accepted.length === 0) {
      abandon();
      const transient = rejected.find((r) => r.reply.code >= 400 && r.reply.code < 500);
      const first = transient ?? rejected[0];
      throw new SmtpError(`all recipients rejected: ${describeRejected(rejected)}`, {
        kind: "reply",
        permanent: transient === undefined,
        replyCode: first.reply.code,
        messageRefused: true,
      });
    }
    dataReply ??= await this.#command("DATA", "the reply to DATA");
    if (dataReply.code !== 354) {
      throw replyError("DATA refused", dataReply, { messageRefused: true });
    }
    this.#inData = true;
    this.#stage = "the reply to the message";
    const next = pipelining ? options.next?.() : null;
    if (next) {
      this.#commandsAhead = true;
      await this.#write(concatBytes([data, encoder.encode(next.commands.join("\r\n") + "\r\n")]));
    } else {
      await this.#write(data);
    }
    const final = await this.#readReply(this.#timeouts.commandMs);
    this.#inData = false;
    if (final.code !== 250) throw replyError("message rejected", final, { messageRefused: true });
    return { accepted, rejected, reply: final };
  }

  #pipelining(): boolean {
    return this.#capabilities.has("PIPELINING");
  }

  #utf8Allowed(mail: OutgoingMail): boolean {
    return this.#capabilities.has("SMTPUTF8") || !needsUtf8(mail);
  }

  /** Writes one command and reads its reply. */
  async #command(line: string, stage = `the reply to ${line.split(" ")[0]}`): Promise<SmtpReply> {
    this.#stage = stage;
    await this.#write(encoder.encode(line + "\r\n"));
    return await this.#readReply(this.#timeouts.commandMs);
  }

  /** Says QUIT, waits briefly for the 221, and closes the socket. Never throws. */
  async quit(): Promise<void> {
    if (this.#closed) return;
    if (this.#inData || this.#commandsAhead) return this.close();
    try {
      this.#deadline = Math.min(this.#deadline, Date.now() + QUIT_WAIT_MS);
      await this.#command("QUIT");
    } catch {
      // The session is over either way.
    } finally {
      this.close();
    }
  }

  /** Writes QUIT without waiting for the answer, then closes. For idle connections. */
  async quitQuietly(): Promise<void> {
    if (this.#closed) return;
    if (this.#inData || this.#commandsAhead) return this.close();
    try {
      this.#deadline = Date.now() + QUIT_WAIT_MS;
      await this.#write(encoder.encode("QUIT\r\n"));
    } catch {
      // Closing anyway.
    } finally {
      this.close();
    }
  }

  /** Closes the socket at once; pending reads and writes end. */
  close(): void {
    this.release();
    if (this.#watchdog !== null) clearTimeout(this.#watchdog.timer);
    this.#watchdog = null;
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  async #handshake(relay: SmtpRelay, options: SmtpOpenOptions): Promise<void> {
    this.#stage = "the greeting";
    const greeting = await this.#readReply(this.#timeouts.greetingMs);
    this.#greeted = true;
    if (greeting.code !== 220) throw replyError("greeting refused", greeting);
    await this.#ehlo(options.heloName);
    if (relay.secureTransport === "starttls") {
      if (!this.#capabilities.has("STARTTLS")) {
        throw new SmtpError("server does not offer STARTTLS", { kind: "policy", permanent: true });
      }
      const reply = await this.#command("STARTTLS");
      if (reply.code !== 220) throw replyError("STARTTLS refused", reply);
      await this.#upgrade(relay.host, options.caCerts);
      // Capabilities before TLS are not to be trusted (RFC 3207 4.2).
      await this.#ehlo(options.heloName);
    }
    await this.#authenticate(relay.username, relay.password);
  }

  async #ehlo(heloName: string): Promise<void> {
    const reply = await this.#command(`EHLO ${heloName}`, "the reply to EHLO");
    if (reply.code !== 250) throw replyError("EHLO rejected", reply);
    this.#capabilities = parseCapabilities(reply);
  }

  /** Logs in with the first mechanism of AUTH_MECHANISMS the last EHLO reply offers. */
  async #authenticate(username: string, password: string): Promise<void> {
    const offered = authMechanisms(this.#capabilities);
    const mechanism = AUTH_MECHANISMS.find((name) => offered.includes(name));
    if (mechanism === "LOGIN") return await this.#authLogin(username, password);
    if (mechanism === "PLAIN") return await this.#authPlain(username, password);
    const offers = offered.length === 0 ? "no AUTH mechanism" : `AUTH ${offered.join(" ")}`;
    throw new SmtpError(`server offers neither AUTH LOGIN nor AUTH PLAIN: it offers ${offers}`, {
      kind: "policy",
      permanent: true,
    });
  }

  async #authLogin(username: string, password: string): Promise<void> {
    let reply = await this.#command("AUTH LOGIN", "the reply to AUTH LOGIN");
    if (reply.code === 334) {
      reply = await this.#command(base64(username), "the reply to the AUTH LOGIN username");
      if (reply.code === 334) {
        reply = await this.#command(base64(password), "the reply to the AUTH LOGIN password");
      }
    }
    if (reply.code !== 235) throw replyError("authentication failed", reply);
  }

  /** RFC 4616: an empty authorization identity, NUL, user, NUL, password, as the initial response. */
  async #authPlain(username: string, password: string): Promise<void> {
    const response = base64(`\0${username}\0${password}`);
    const reply = await this.#command(`AUTH PLAIN ${response}`, "the reply to AUTH PLAIN");
    if (reply.code !== 235) throw replyError("authentication failed", reply);
  }

  /** STARTTLS: nothing may be pending or buffered on the plaintext socket. */
  async #upgrade(hostname: string, caCerts: string[] | undefined): Promise<void> {
    // Bytes the server sent after its 220 are discarded, never read as TLS-protected.
    this.#buffer = new Uint8Array(0);
    this.#stage = "the TLS handshake";
    let tls: Deno.TlsConn;
    try {
      tls = await Deno.startTls(this.#conn as Deno.TcpConn, { hostname, caCerts });
    } catch (error) {
      throw this.#failure ?? networkError("TLS upgrade failed", error);
    }
    this.#conn = tls;
    await this.#bounded(this.#timeouts.commandMs, async () => {
      await tls.handshake();
    }, "TLS handshake failed");
  }

  /**
   * Sends commands in one write when the server offers PIPELINING, else one by one. With
   * `reused`, a failure of the first command, or a 421 to it, says the session went stale
   * with nothing sent (`beforeTransaction`). `written`: they are on the wire already
   * (pipelined behind the message before), only their replies are read.
   */
  async #batch(commands: string[], reused: boolean, written: boolean): Promise<SmtpReply[]> {
    const replies: SmtpReply[] = [];
    const pipelining = this.#capabilities.has("PIPELINING");
    try {
      if (pipelining && !written) {
        this.#stage = replyStage(commands[0]);
        await this.#write(encoder.encode(commands.join("\r\n") + "\r\n"));
      }
      for (const command of commands) {
        this.#stage = replyStage(command);
        const reply = pipelining
          ? await this.#readReply(this.#timeouts.commandMs)
          : await this.#command(command, this.#stage);
        replies.push(reply);
        // A 421 to a reused session's first command (a server ending an idle session) ends
        // the batch: nothing was sent, and a fresh session may try again.
        if (reused && replies.length === 1 && reply.code === 421) {
          throw replyError("session closed by the relay", reply, { beforeTransaction: true });
        }
        if (!pipelining && command.startsWith("MAIL ") && reply.code !== 250) {
          // Without a sender there is no point in asking about recipients.
          while (replies.length < commands.length) replies.push(reply);
          break;
        }
      }
    } catch (error) {
      if (
        reused && replies.length === 0 && error instanceof SmtpError && error.kind !== "aborted"
      ) {
        throw new SmtpError(error.message, {
          kind: error.kind,
          permanent: error.permanent,
          replyCode: error.replyCode,
          beforeTransaction: true,
          cause: error,
        });
      }
      throw error;
    }
    return replies;
  }

  async #readReply(limitMs: number): Promise<SmtpReply> {
    const lines: string[] = [];
    let code = 0;
    let total = 0;
    for (;;) {
      const line = await this.#readLine(limitMs);
      total += line.length + 2;
      const match = /^(\d{3})([ -]?)(.*)$/.exec(line);
      if (match === null || total > MAX_REPLY_BYTES) {
        throw new SmtpError(`unexpected answer while waiting for ${this.#stage}`, {
          kind: "protocol",
          permanent: false,
        });
      }
      const lineCode = Number(match[1]);
      if (lines.length > 0 && lineCode !== code) {
        throw new SmtpError(`inconsistent reply codes while waiting for ${this.#stage}`, {
          kind: "protocol",
          permanent: false,
        });
      }
      code = lineCode;
      lines.push(match[3]);
      if (match[2] !== "-") return { code, lines };
    }
  }

  async #readLine(limitMs: number): Promise<string> {
    for (;;) {
      const end = this.#buffer.indexOf(10);
      if (end >= 0) {
        const stop = end > 0 && this.#buffer[end - 1] === 13 ? end - 1 : end;
        const line = decoder.decode(this.#buffer.subarray(0, stop));
        this.#buffer = this.#buffer.subarray(end + 1);
        return line;
      }
      if (this.#buffer.length > MAX_REPLY_BYTES) {
        throw new SmtpError(`overlong reply while waiting for ${this.#stage}`, {
          kind: "protocol",
          permanent: false,
        });
      }
      const chunk = this.#readInto;
      const n = await this.#bounded(limitMs, () => this.#conn.read(chunk), "connection failed");
      if (n === null) {
        throw new SmtpError(`connection closed by the server while waiting for ${this.#stage}`, {
          kind: "network",
          permanent: false,
        });
      }
      this.#buffer = this.#buffer.length === 0
        ? chunk.slice(0, n)
        : concatBytes([this.#buffer, chunk.subarray(0, n)]);
    }
  }

  async #write(bytes: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < bytes.length) {
      offset += await this.#bounded(
        this.#timeouts.commandMs,
        () => this.#conn.write(bytes.subarray(offset)),
        "connection failed",
      );
    }
  }

  /**
   * Runs one socket operation under the smaller of `limitMs` and the time left
   * to the deadline; on expiry the socket is closed, which ends the operation.
   */
  async #bounded<T>(limitMs: number, op: () => Promise<T>, networkText: string): Promise<T> {
    if (this.#failure) throw this.#failure;
    if (this.#closed) {
      throw new SmtpError("connection already closed", { kind: "network", permanent: false });
    }
    const left = this.#deadline - Date.now();
    const waitMs = Math.min(limitMs, left);
    this.#pendingLimitMs = limitMs;
    this.#pendingOverall = left <= limitMs;
    if (waitMs <= 0) {
      this.#fail(this.#timeoutError());
      throw this.#failure!;
    }
    this.#pendingUntil = performance.now() + waitMs;
    this.#arm(waitMs);
    try {
      return await op();
    } catch (error) {
      throw this.#failure ?? networkError(networkText, error);
    } finally {
      this.#pendingUntil = Infinity;
    }
  }

  /** The time-out of the socket operation under way (#bounded). */
  #timeoutError(): SmtpError {
    return new SmtpError(
      this.#pendingOverall
        ? `conversation time-out exceeded while waiting for ${this.#stage}`
        : `timed out after ${this.#pendingLimitMs} ms waiting for ${this.#stage}`,
      { kind: "timeout", permanent: false },
    );
  }

  /**
   * Makes sure the watchdog fires within `waitMs`: one due no later stays. When it fires it
   * fails the operation under way if that one's time is up, and otherwise waits for
   * whichever operation is pending then.
   */
  #arm(waitMs: number): void {
    const at = performance.now() + waitMs;
    if (this.#watchdog !== null) {
      if (this.#watchdog.at <= at) return;
      clearTimeout(this.#watchdog.timer);
    }
    const timer = setTimeout(() => {
      this.#watchdog = null;
      if (this.#pendingUntil === Infinity || this.#closed) return;
      const left = this.#pendingUntil - performance.now();
      if (left <= 0) this.#fail(this.#timeoutError());
      else this.#arm(left);
    }, waitMs);
    // An idle pooled session's watchdog does not keep the process alive (close() clears it).
    Deno.unrefTimer(Number(timer));
    this.#watchdog = { timer, at };
  }

  #fail(error: SmtpError): void {
    this.#failure ??= error;
    this.close();
  }
}

/**
 * Connects to `options.address` or else the relay's name (TLS from the first byte in `on`
 * mode, verified against the name) within `limitMs`.
 */
async function connectWithin(
  relay: SmtpRelay,
  options: Pick<SmtpOpenOptions, "address" | "caCerts" | "signal">,
  limitMs: number,
): Promise<Deno.Conn> {
  const { caCerts, signal } = options;
  if (signal?.aborted) {
    throw new SmtpError("delivery aborted", { kind: "aborted", permanent: false });
  }
  if (limitMs <= 0) {
    throw new SmtpError("conversation time-out exceeded before connecting", {
      kind: "timeout",
      permanent: false,
    });
  }
  const { host: hostname, port } = relay;
  const tcp = Deno.connect({ hostname: options.address ?? hostname, port, transport: "tcp" });
  // startTls at once is implicit TLS, and lets the name differ from the address connected to.
  const pending = relay.secureTransport === "on"
    ? tcp.then((conn) => Deno.startTls(conn, { hostname, caCerts }))
    : tcp;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(
        new SmtpError(`timed out after ${limitMs} ms connecting`, {
          kind: "timeout",
          permanent: false,
        }),
      );
    }, limitMs);
    onAbort = () =>
      reject(new SmtpError("delivery aborted", { kind: "aborted", permanent: false }));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([
      pending.catch((error) => {
        throw networkError("connection failed", error);
      }),
      stop,
    ]);
  } catch (error) {
    // A connection that completes after the time-out is closed straight away.
    pending.then((conn) => conn.close(), () => {});
    throw error;
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener("abort", onAbort);
  }
}

/** Whether an address of the message is not ASCII (it then needs SMTPUTF8). */
function needsUtf8(mail: OutgoingMail): boolean {
  return !ASCII.test(mail.from) || mail.recipients.some((address) => !ASCII.test(address));
}

/** What a batch's reply answers, for error texts: its command's verb (MAIL, RCPT or DATA). */
function replyStage(command: string): string {
  return `the reply to ${command.slice(0, 4)}`;
}

/** A line ending that is not CRLF: a CR alone, or an LF without its CR. */
const BARE_LINE_END = /\r(?!\n)|(?<!\r)\n/;

/**
 * Dot-stuffs the message (RFC 5321 4.5.2), ends it with CRLF and adds the final dot. A
 * message already in CRLF lines with no line starting with a dot (most are) is not copied.
 */
export function encodeData(data: string): Uint8Array {
  let text = BARE_LINE_END.test(data) ? data.replace(/\r\n|\r|\n/g, "\r\n") : data;
  if (!text.endsWith("\r\n")) text += "\r\n";
  if (text.startsWith(".") || text.includes("\n.")) text = text.replace(/(^|\r\n)\./g, "$1..");
  return encoder.encode(text + ".\r\n");
}

/**
 * EHLO keywords (upper case) mapped to their parameters; the first line is the greeting.
 * A keyword given twice (`AUTH LOGIN PLAIN` and the old `AUTH=LOGIN`) keeps both lists.
 */
export function parseCapabilities(reply: SmtpReply): Map<string, string> {
  const capabilities = new Map<string, string>();
  for (const line of reply.lines.slice(1)) {
    const [keyword, ...params] = line.trim().split(/[\s=]+/);
    if (!keyword) continue;
    const name = keyword.toUpperCase();
    const earlier = capabilities.get(name);
    const all = [...(earlier?.split(" ") ?? []), ...params].filter((param) => param !== "");
    capabilities.set(name, [...new Set(all)].join(" "));
  }
  return capabilities;
}

/** The SASL mechanisms an EHLO reply offers (upper case, in the server's order). */
export function authMechanisms(capabilities: ReadonlyMap<string, string>): string[] {
  const params = capabilities.get("AUTH") ?? "";
  return [...new Set(params.toUpperCase().split(" ").filter((name) => name !== ""))];
}

function base64(text: string): string {
  return encoder.encode(text).toBase64();
}

/** The reply text as it may appear in an error: one line, no control characters, short. */
function replyText(reply: SmtpReply): string {
  // deno-lint-ignore no-control-regex -- control characters are what is removed here
  const text = reply.lines.join(" ").replace(/[\x00-\x1f\x7f]+/g, " ").replace(/\s+/g, " ").trim();
  return text.length > 200 ? text.slice(0, 200) + "…" : text;
}

function replyError(
  what: string,
  reply: SmtpReply,
  options: { beforeTransaction?: boolean; messageRefused?: boolean } = {},
): SmtpError {
  const text = replyText(reply);
  const permanent = reply.code >= 500;
  return new SmtpError(`${reply.code} ${what}${text ? `: ${text}` : ""}`, {
    kind: "reply",
    permanent,
    replyCode: reply.code,
    beforeTransaction: options.beforeTransaction,
    messageRefused: options.messageRefused,
  });
}

export function describeRejected(rejected: RejectedRecipient[]): string {
  return rejected.map((r) => `${r.address} (${r.reply.code})`).join(", ");
}

/**
 * One text for every failure before an SMTP greeting: a refused connection, a time-out,
 * a TLS failure and a service that is not SMTP read the same, so a test send cannot be
 * used to scan which ports of a host are open. A cancellation stays what it is.
 */
function noSmtpService(error: unknown): unknown {
  if (error instanceof SmtpError && error.kind === "aborted") return error;
  return new SmtpError("no SMTP service answered", {
    kind: "network",
    permanent: false,
    beforeTransaction: true,
    cause: error,
  });
}

function networkError(what: string, error: unknown): SmtpError {
  const detail = error instanceof Error ? error.message : String(error);
  return new SmtpError(`${what}: ${detail}`, { kind: "network", permanent: false, cause: error });
}
