import assert from "node:assert/strict";
import {
  authMechanisms,
  encodeData,
  parseCapabilities,
  SmtpConnection,
  SmtpError,
} from "./client.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

interface Scripted {
  port: number;
  /** Commands received, one per line (message text excluded). */
  commands: string[];
  /** Raw chunks as read, to see what arrived in one write. */
  chunks: string[];
  /** The message text received after 354, up to the final dot. */
  data: string[];
  /** Resolves when the client has closed the connection. */
  finished: Promise<void>;
  close(): void;
}

/**
 * A one-connection SMTP peer answering each command line from `answer`, and each
 * message's final dot from `endOfData`.
 */
function scriptedServer(
  greeting: string,
  answer: (command: string) => string,
  endOfData = () => "250 2.0.0 queued\r\n",
): Scripted {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const commands: string[] = [];
  const chunks: string[] = [];
  const data: string[] = [];
  const finished = (async () => {
    const conn = await listener.accept();
    try {
      await conn.write(encoder.encode(greeting));
      let pending = "";
      let inData = false;
      const buf = new Uint8Array(64 * 1024);
      for (;;) {
        const n = await conn.read(buf).catch(() => null);
        if (n === null) return;
        const chunk = decoder.decode(buf.subarray(0, n));
        chunks.push(chunk);
        pending += chunk;
        let out = "";
        for (;;) {
          if (inData) {
            const end = pending.indexOf("\r\n.\r\n");
            if (end < 0) break;
            data.push(pending.slice(0, end + 2));
            pending = pending.slice(end + 5);
            inData = false;
            out += endOfData();
            continue;
          }
          const eol = pending.indexOf("\r\n");
          if (eol < 0) break;
          const line = pending.slice(0, eol);
          pending = pending.slice(eol + 2);
          commands.push(line);
          const reply = answer(line);
          if (reply.startsWith("354")) inData = true;
          out += reply;
        }
        if (out) await conn.write(encoder.encode(out));
      }
    } finally {
      conn.close();
    }
  })();
  const { port } = listener.addr as Deno.NetAddr;
  return { port, commands, chunks, data, finished, close: () => listener.close() };
}

function standardAnswers(ehlo: string) {
  return (line: string): string => {
    if (line.startsWith("EHLO")) return ehlo;
    if (line === "AUTH LOGIN") return "334 VXNlcm5hbWU6\r\n";
    if (line.startsWith("MAIL") || line.startsWith("RCPT") || line === "RSET") {
      return "250 2.1.0 ok\r\n";
    }
    if (line === "DATA") return "354 go ahead\r\n";
    if (line === "QUIT") return "221 bye\r\n";
    // The username, then the password, of AUTH LOGIN.
    return line === btoa("user") ? "334 UGFzc3dvcmQ6\r\n" : "235 2.7.0 accepted\r\n";
  };
}

/** The EHLO reply of a relay offering PIPELINING and AUTH LOGIN. */
const PIPELINING_EHLO = "250-mail.example\r\n250-PIPELINING\r\n250 AUTH LOGIN\r\n";

const timeouts = { connectMs: 2000, greetingMs: 2000, commandMs: 2000 };
const relay = {
  host: "127.0.0.1",
  secureTransport: "off" as const,
  username: "user",
  password: "pässwörd ✓",
};

/** Opens a session with the test relay's credentials to a scripted server. */
function openTo(port: number): Promise<SmtpConnection> {
  return SmtpConnection.open({ ...relay, port }, {
    heloName: "relay.test",
    timeouts,
    deadline: Date.now() + 5000,
  });
}

Deno.test("encodeData dot-stuffs every line that starts with a dot and ends with CRLF.CRLF", () => {
  const encoded = decoder.decode(encodeData(".first\r\nmiddle\r\n.\r\n..two\nbare.dot"));
  assert.equal(encoded, "..first\r\nmiddle\r\n..\r\n...two\r\nbare.dot\r\n.\r\n");
  assert.equal(decoder.decode(encodeData("ends\r\n")), "ends\r\n.\r\n");
  // Each line-ending fix alone, and a dot alone: the checks that let most messages through
  // uncopied must still see them.
  assert.equal(decoder.decode(encodeData("a\rb\r\nc")), "a\r\nb\r\nc\r\n.\r\n");
  assert.equal(decoder.decode(encodeData("a\r\nb\nc\r\n")), "a\r\nb\r\nc\r\n.\r\n");
  assert.equal(decoder.decode(encodeData("a\r\n.b\r\n")), "a\r\n..b\r\n.\r\n");
  assert.equal(decoder.decode(encodeData(".a")), "..a\r\n.\r\n");
  assert.equal(decoder.decode(encodeData("plain\r\ntext\r\n")), "plain\r\ntext\r\n.\r\n");
});

Deno.test("parseCapabilities reads keywords and parameters from a multi-line EHLO reply", () => {
  const caps = parseCapabilities({
    code: 250,
    lines: [
      "mail.example greets you",
      "PIPELINING",
      "SIZE 10240000",
      "auth LOGIN PLAIN",
      "AUTH=LOGIN",
    ],
  });
  assert.equal(caps.get("PIPELINING"), "");
  assert.equal(caps.get("SIZE"), "10240000");
  assert.equal(caps.get("AUTH"), "LOGIN PLAIN", "both AUTH lines, each mechanism once");
  assert.deepEqual(authMechanisms(caps), ["LOGIN", "PLAIN"]);
  assert.equal(caps.has("MAIL.EXAMPLE"), false, "the greeting line is not a capability");
});

Deno.test("SmtpConnection logs in with AUTH PLAIN (RFC 4616 initial response) when LOGIN is not offered", async () => {
  const server = scriptedServer("220 ready\r\n", (line) => {
    if (line.startsWith("EHLO")) return "250-mail.example\r\n250 AUTH CRAM-MD5 PLAIN\r\n";
    if (line.startsWith("AUTH PLAIN ")) return "235 2.7.0 accepted\r\n";
    return line === "QUIT" ? "221 bye\r\n" : "502 5.5.1 unexpected\r\n";
  });
  try {
    const connection = await openTo(server.port);
    await connection.quit();
    await server.finished;
    const credentials = encoder.encode("\0user\0pässwörd ✓").toBase64();
    assert.deepEqual(server.commands, ["EHLO relay.test", `AUTH PLAIN ${credentials}`, "QUIT"]);
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection refuses, as permanent, a server offering no AUTH mechanism, without logging in", async () => {
  const server = scriptedServer(
    "220 ready\r\n",
    standardAnswers("250-mail.example\r\n250 PIPELINING\r\n"),
  );
  try {
    const error = await openTo(server.port).catch((e) => e);
    assert.ok(error instanceof SmtpError);
    assert.equal(error.permanent, true);
    assert.equal(
      error.message,
      "server offers neither AUTH LOGIN nor AUTH PLAIN: it offers no AUTH mechanism",
    );
    await server.finished;
    assert.deepEqual(server.commands, ["EHLO relay.test"]);
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection logs in with AUTH LOGIN in UTF-8 base64 and pipelines MAIL, RCPT and DATA", async () => {
  const server = scriptedServer(
    "220-mail.example ESMTP\r\n220-second greeting line\r\n220 ready\r\n",
    standardAnswers("250-mail.example\r\n250-PIPELINING\r\n250-SIZE 1000000\r\n250 AUTH LOGIN\r\n"),
  );
  try {
    const connection = await openTo(server.port);
    assert.deepEqual([...connection.capabilities.keys()], ["PIPELINING", "SIZE", "AUTH"]);
    const result = await connection.send({
      from: "a@example.org",
      recipients: ["b@example.org", "c@example.org"],
      data: "Subject: x\r\n\r\n.dot line\r\n",
    });
    assert.deepEqual(result.accepted, ["b@example.org", "c@example.org"]);
    await connection.quit();
    await server.finished;

    assert.deepEqual(server.commands.slice(0, 4), [
      "EHLO relay.test",
      "AUTH LOGIN",
      btoa("user"),
      encoder.encode("pässwörd ✓").toBase64(),
    ]);
    assert.deepEqual(server.commands.slice(4), [
      "MAIL FROM:<a@example.org> SIZE=29",
      "RCPT TO:<b@example.org>",
      "RCPT TO:<c@example.org>",
      "DATA",
      "QUIT",
    ]);
    assert.ok(
      server.chunks.some((c) =>
        c.includes("MAIL FROM") && c.includes("RCPT") && c.includes("DATA")
      ),
      "MAIL, RCPT and DATA should travel in one write",
    );
    assert.deepEqual(server.data, ["Subject: x\r\n\r\n..dot line\r\n"]);
  } finally {
    server.close();
  }
});

/** One message to one recipient, for the reused-session tests. */
const mail = { from: "a@example.org", recipients: ["b@example.org"], data: "x\r\n" };

Deno.test("SmtpConnection on a reused session opens the next transaction with MAIL, no RSET", async () => {
  const server = scriptedServer(
    "220 ready\r\n",
    standardAnswers(PIPELINING_EHLO),
  );
  try {
    const connection = await openTo(server.port);
    await connection.send(mail);
    await connection.send(mail, { reused: true });
    await connection.quit();
    await server.finished;
    assert.deepEqual(server.commands.slice(4), [
      "MAIL FROM:<a@example.org>",
      "RCPT TO:<b@example.org>",
      "DATA",
      "MAIL FROM:<a@example.org>",
      "RCPT TO:<b@example.org>",
      "DATA",
      "QUIT",
    ]);
    assert.equal(server.data.length, 2);
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection writes the next message's commands with this message's data, and reads their replies after", async () => {
  const server = scriptedServer(
    "220 ready\r\n",
    standardAnswers(PIPELINING_EHLO),
  );
  try {
    const connection = await openTo(server.port);
    const second = { ...mail, recipients: ["c@example.org"], data: "y\r\n" };
    const first = await connection.send(mail, { next: () => connection.prepare(second) });
    assert.equal(first.reply.code, 250);
    const after = await connection.send(connection.prepare(second), {
      reused: true,
      written: true,
    });
    assert.deepEqual(after.accepted, ["c@example.org"]);
    await connection.quit();
    await server.finished;
    assert.deepEqual(server.commands.slice(4), [
      "MAIL FROM:<a@example.org>",
      "RCPT TO:<b@example.org>",
      "DATA",
      "MAIL FROM:<a@example.org>",
      "RCPT TO:<c@example.org>",
      "DATA",
      "QUIT",
    ]);
    assert.deepEqual(server.data, ["x\r\n", "y\r\n"]);
    // One write: the first message's final dot and the second's commands.
    assert.ok(
      server.chunks.some((chunk) => chunk.includes("x\r\n.\r\nMAIL FROM:<a@example.org>\r\n")),
      `chunks: ${JSON.stringify(server.chunks)}`,
    );
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection reads a 421 to a message's commands written behind the one before as a stale session, nothing sent", async () => {
  let mails = 0;
  const answers = standardAnswers(PIPELINING_EHLO);
  const server = scriptedServer("220 ready\r\n", (line) => {
    if (line.startsWith("MAIL") && ++mails === 2) return "421 4.3.2 closing\r\n";
    if (mails === 2 && (line.startsWith("RCPT") || line === "DATA")) return "503 5.5.1 no\r\n";
    return answers(line);
  });
  try {
    const connection = await openTo(server.port);
    await connection.send(mail, { next: () => connection.prepare(mail) });
    const error = await connection.send(connection.prepare(mail), { reused: true, written: true })
      .then(() => assert.fail("the relay ended the session"), (error) => error);
    assert.ok(error instanceof SmtpError && error.beforeTransaction);
    assert.equal(server.data.length, 1);
    connection.close();
    await server.finished;
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection closes, without QUIT, a session whose message is refused with the next one's commands on the wire", async () => {
  const server = scriptedServer(
    "220 ready\r\n",
    standardAnswers(PIPELINING_EHLO),
    () => "554 5.7.1 refused\r\n",
  );
  try {
    const connection = await openTo(server.port);
    const error = await connection.send(mail, { next: () => connection.prepare(mail) }).then(
      () => assert.fail("the message was refused"),
      (error) => error,
    );
    assert.ok(error instanceof SmtpError && error.messageRefused && error.replyCode === 554);
    await connection.quit();
    await server.finished;
    assert.ok(connection.closed);
    // The second DATA was answered 354: a QUIT now would have been message text.
    assert.deepEqual(server.commands.slice(-3), [
      "MAIL FROM:<a@example.org>",
      "RCPT TO:<b@example.org>",
      "DATA",
    ]);
    assert.equal(server.data.length, 1);
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection without PIPELINING never asks for a next message", async () => {
  const server = scriptedServer(
    "220 ready\r\n",
    standardAnswers("250-mail.example\r\n250 AUTH LOGIN\r\n"),
  );
  try {
    const connection = await openTo(server.port);
    let asked = 0;
    await connection.send(mail, { next: () => (asked++, connection.prepare(mail)) });
    assert.equal(asked, 0);
    assert.equal(connection.takesBehind(mail), false);
    await connection.quit();
    await server.finished;
    assert.equal(server.commands.at(-1), "QUIT");
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection reads a 421 to a reused session's MAIL as a stale session, nothing sent", async (t) => {
  for (const pipelining of [true, false]) {
    await t.step(pipelining ? "pipelined" : "one command at a time", async () => {
      let mails = 0;
      const answers = standardAnswers(
        `250-mail.example\r\n${pipelining ? "250-PIPELINING\r\n" : ""}250 AUTH LOGIN\r\n`,
      );
      const server = scriptedServer("220 ready\r\n", (line) => {
        if (line.startsWith("MAIL") && ++mails === 2) return "421 4.4.2 idle too long\r\n";
        return answers(line);
      });
      try {
        const connection = await openTo(server.port);
        await connection.send(mail);
        const error = await connection.send(mail, { reused: true }).catch((e) => e);
        assert.ok(error instanceof SmtpError);
        assert.equal(error.beforeTransaction, true, "a fresh session may try again");
        assert.equal(error.replyCode, 421);
        connection.close();
        await server.finished;
        assert.equal(server.data.length, 1);
      } finally {
        server.close();
      }
    });
  }
  await t.step("a fresh session's 421 is the relay's answer, not a stale session", async () => {
    const answers = standardAnswers(PIPELINING_EHLO);
    const server = scriptedServer(
      "220 ready\r\n",
      (line) => line.startsWith("MAIL") ? "421 4.3.2 busy\r\n" : answers(line),
    );
    try {
      const connection = await openTo(server.port);
      const error = await connection.send(mail).catch((e) => e);
      assert.ok(error instanceof SmtpError);
      assert.equal(error.beforeTransaction, false);
      connection.close();
      await server.finished;
    } finally {
      server.close();
    }
  });
});

Deno.test("SmtpConnection without PIPELINING sends one command at a time and stops after a refused sender", async () => {
  const answers = standardAnswers("250-mail.example\r\n250 AUTH LOGIN\r\n");
  const server = scriptedServer(
    "220 ready\r\n",
    (line) => line.startsWith("MAIL") ? "553 5.1.8 sender refused\r\n" : answers(line),
  );
  try {
    const connection = await openTo(server.port);
    const error = await connection.send({
      from: "a@example.org",
      recipients: ["b@example.org"],
      data: "x",
    }).catch((e) => e);
    assert.ok(error instanceof SmtpError);
    assert.equal(error.permanent, true);
    assert.equal(error.replyCode, 553);
    assert.equal(error.message, "553 sender rejected: 5.1.8 sender refused");
    assert.equal(error.messageRefused, false, "a refused sender is the relay's fault");
    await connection.quit();
    await server.finished;
    assert.ok(!server.commands.some((c) => c.startsWith("RCPT")));
    assert.ok(server.chunks.every((c) => c.split("\r\n").length <= 2), "one command per write");
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection treats a 4xx greeting as transient and closes the socket", async () => {
  const server = scriptedServer("421 4.3.2 too busy\r\n", () => "500 no\r\n");
  try {
    const error = await openTo(server.port).catch((e) => e);
    assert.ok(error instanceof SmtpError);
    assert.equal(error.permanent, false);
    assert.equal(error.replyCode, 421);
    assert.equal(error.messageRefused, false);
    await server.finished; // the client closed its end
    assert.deepEqual(server.commands, []);
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection times out a silent greeting with the greeting limit", async () => {
  const server = scriptedServer("", () => "");
  try {
    const started = performance.now();
    const error = await SmtpConnection.open({ ...relay, port: server.port }, {
      heloName: "relay.test",
      timeouts: { ...timeouts, greetingMs: 150 },
      deadline: Date.now() + 5000,
    }).catch((e) => e);
    // Before a greeting every failure reads the same (no port scans); the cause says which.
    assert.ok(error instanceof SmtpError);
    assert.equal(error.message, "no SMTP service answered");
    const cause = error.cause as SmtpError;
    assert.equal(cause.kind, "timeout");
    assert.equal(cause.message, "timed out after 150 ms waiting for the greeting");
    assert.ok(performance.now() - started < 2000);
    await server.finished;
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection stops at the conversation deadline even when each wait is allowed longer", async () => {
  const server = scriptedServer("", () => "");
  try {
    const error = await SmtpConnection.open({ ...relay, port: server.port }, {
      heloName: "relay.test",
      timeouts,
      deadline: Date.now() + 150,
    }).catch((e) => e);
    assert.ok(error instanceof SmtpError);
    assert.equal(error.message, "no SMTP service answered");
    const cause = error.cause as SmtpError;
    assert.equal(cause.kind, "timeout");
    assert.match(cause.message, /^conversation time-out exceeded while waiting for the greeting$/);
    await server.finished;
  } finally {
    server.close();
  }
});

Deno.test("SmtpConnection marks refusals of the recipients or of DATA as the message's, not the relay's", async () => {
  for (
    const [refuse, code] of [
      [(line: string) => line.startsWith("RCPT") ? "550 5.1.1 no such user\r\n" : null, 550],
      [(line: string) => line === "DATA" ? "554 5.7.1 content refused\r\n" : null, 554],
    ] as const
  ) {
    const answers = standardAnswers("250-mail.example\r\n250 AUTH LOGIN\r\n");
    const server = scriptedServer("220 ready\r\n", (line) => refuse(line) ?? answers(line));
    try {
      const connection = await openTo(server.port);
      const error = await connection.send({
        from: "a@example.org",
        recipients: ["b@example.org"],
        data: "x",
      }).catch((e) => e);
      assert.ok(error instanceof SmtpError);
      assert.deepEqual([error.replyCode, error.permanent, error.messageRefused], [
        code,
        true,
        true,
      ]);
      await connection.quit();
      await server.finished;
    } finally {
      server.close();
    }
  }
});

Deno.test("SmtpConnection sends a non-ASCII address with SMTPUTF8, and refuses it unsent where not offered", async (t) => {
  const mail = { from: "a@example.org", recipients: ["josé@xn--bcher-kva.example"], data: "x" };
  await t.step("offered: MAIL FROM carries SMTPUTF8, the address goes as UTF-8", async () => {
    const server = scriptedServer(
      "220 ready\r\n",
      standardAnswers("250-mail.example\r\n250-SMTPUTF8\r\n250 AUTH LOGIN\r\n"),
    );
    try {
      const connection = await openTo(server.port);
      const result = await connection.send(mail);
      assert.deepEqual(result.accepted, mail.recipients);
      await connection.quit();
      await server.finished;
      assert.deepEqual(server.commands.slice(4, 6), [
        "MAIL FROM:<a@example.org> SMTPUTF8",
        "RCPT TO:<josé@xn--bcher-kva.example>",
      ]);
    } finally {
      server.close();
    }
  });
  await t.step("not offered: a permanent refusal of the message, no MAIL sent", async () => {
    const server = scriptedServer(
      "220 ready\r\n",
      standardAnswers("250-mail.example\r\n250-SIZE 1000000\r\n250 AUTH LOGIN\r\n"),
    );
    try {
      const connection = await openTo(server.port);
      const error = await connection.send(mail).catch((e) => e);
      assert.ok(error instanceof SmtpError);
      assert.equal(error.permanent, true);
      assert.equal(error.messageRefused, true);
      assert.equal(
        error.message,
        "the relay does not offer SMTPUTF8, which an address that is not ASCII needs",
      );
      // ASCII mail still goes on the same session, without the parameter.
      await connection.send({ ...mail, recipients: ["b@example.org"] });
      await connection.quit();
      await server.finished;
      assert.deepEqual(server.commands.filter((c) => /^(MAIL|RCPT)/.test(c)), [
        "MAIL FROM:<a@example.org> SIZE=6",
        "RCPT TO:<b@example.org>",
      ]);
    } finally {
      server.close();
    }
  });
});
