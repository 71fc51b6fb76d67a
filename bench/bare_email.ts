/**
 * The bare durable email: the floor of bench:spike's workload (form post → email) on this
 * machine, what a process doing only the durable work a delivered email needs costs.
 *
 * Deno.serve takes an urlencoded post, stores its envelope and one job (group-committed,
 * 202 after the commit) and claims the job at once without a read (versionstamp-checked,
 * group-committed); one of SESSIONS pooled SMTP sessions (AUTH PLAIN once; MAIL, RCPT and
 * DATA in one write; the message and its dot in the next) sends it, then deletes the job and
 * the envelope and records the outcome (group-committed, the session going on meanwhile):
 * the same KV writes as formrelay's, with none of the rest (no sealing, rate limit, origin
 * check, retries, pace, logs or metrics), and nothing waits that need not.
 *
 * With --contract, the floor of what the contract asks of every email besides: the envelope
 * sealed (store/envelope.ts, the sealer of store/sealing.ts), the message built by
 * formrelay's MIME builder (connectors/smtp/message.ts), the accepted submission's and the
 * attempt's log lines (log.ts) and metrics (metrics.ts: the acceptance, the attempt, each
 * commit). formrelay's own code for each, so the line between this and formrelay is what
 * the rest of formrelay costs (checks, routing, the dispatcher, pace, retries).
 *
 * Usage: deno run -A --unstable-kv bare_email.ts PORT KV_PATH SMTP_PORT USER PASSWORD [--contract]
 */
const [portText, kvPath, smtpPortText, user, password, mode] = Deno.args;
const contract = mode === "--contract" ? await contractParts() : null;
const kv = await Deno.openKv(kvPath);
const SESSIONS = 20;
const OUTCOME_TTL_MS = 7 * 24 * 3600 * 1000;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Operations queued while a commit runs share the next one (up to 100 parts). */
function groupCommitter() {
  type Part = { apply(op: Deno.AtomicOperation): void; done(versionstamp: string | null): void };
  const waiting: Part[] = [];
  let busy = false;
  async function run() {
    if (busy) return;
    busy = true;
    while (waiting.length > 0) {
      const batch = waiting.splice(0, 100);
      const op = kv.atomic();
      for (const part of batch) part.apply(op);
      const result = await (contract?.timedCommit(op, batch.length) ?? op.commit());
      for (const part of batch) part.done(result.ok ? result.versionstamp : null);
    }
    busy = false;
  }
  return (apply: Part["apply"]) =>
    new Promise<string | null>((done) => {
      waiting.push({ apply, done });
      queueMicrotask(run);
    });
}
const commit = groupCommitter();

interface Job {
  id: string;
  versionstamp: string;
  envelope: { fields: Record<string, string>; acceptedAt: number };
}

/** What --contract adds to every email, from formrelay's own modules. */
async function contractParts() {
  const [{ createSealer }, { sealEnvelope }, { buildMessage }, { createLogger }, metrics] =
    await Promise.all([
      import("../store/sealing.ts"),
      import("../store/envelope.ts"),
      import("../connectors/smtp/message.ts"),
      import("../log.ts"),
      import("../metrics.ts"),
    ]);
  const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
  const logger = createLogger("info");
  const ids = { orgId: "org_bare", formId: "form_bare", destinationId: "dest_bare" };
  const envelopeOf = (id: string, { fields, acceptedAt }: Job["envelope"]) => ({
    submissionId: id,
    formId: ids.formId,
    formName: "Contact",
    payload: fields,
    metadata: {
      origin: null,
      ip: null,
      userAgent: null,
      referer: null,
      submittedAt: new Date(acceptedAt).toISOString(),
    },
  });
  const ms = (since: number) => Math.round((performance.now() - since) * 10) / 10;
  return {
    timedCommit: metrics.timedCommit,
    /** The envelope's stored value: sealed. */
    async stored(id: string, envelope: Job["envelope"]) {
      return (await sealEnvelope(sealer, envelopeOf(id, envelope))).sealed;
    },
    accepted(id: string, started: number) {
      metrics.countAccepted(ids.formId, false);
      logger.info("submission accepted", {
        ...ids,
        submissionId: id,
        status: 202,
        ms: ms(started),
      });
    },
    message(job: Job) {
      return buildMessage(envelopeOf(job.id, job.envelope), {
        layout: "plain",
        from: "forms@tenant.example",
        to: ["owner@tenant.example"],
        subjectTemplate: "New submission",
        destinationId: ids.destinationId,
      }).data;
    },
    attempted(job: Job, started: number) {
      const { id, envelope } = job;
      const attempt = { ...ids, type: "smtp", submissionId: id, submittedAt: envelope.acceptedAt };
      metrics.countAttempt(attempt, { result: "delivered" }, started);
      logger.info("delivery attempt", {
        ...ids,
        submissionId: id,
        result: "delivered",
        ms: ms(started),
      });
    },
  };
}
const queue: Job[] = [];
const idle: (() => void)[] = [];

Deno.serve({ port: Number(portText), hostname: "127.0.0.1", onListen() {} }, async (request) => {
  if (request.method !== "POST") return new Response("ok");
  const fields = Object.fromEntries(new URLSearchParams(await request.text()));
  const started = performance.now();
  const id = crypto.randomUUID();
  const envelope = { fields, acceptedAt: Date.now() };
  const stored = await contract?.stored(id, envelope) ?? JSON.stringify(envelope);
  const versionstamp = await commit((op) =>
    op.set(["envelope", id], stored).set(["job", id], { state: "pending" })
  );
  if (versionstamp === null) return new Response("store failed", { status: 500 });
  contract?.accepted(id, started);
  claim({ id, versionstamp, envelope });
  return Response.json({ ok: true, submissionId: id }, { status: 202 });
});

/** Claims a stored job and queues it for a session. */
async function claim(job: Job) {
  const claimed = await commit((op) =>
    op.check({ key: ["job", job.id], versionstamp: job.versionstamp })
      .set(["job", job.id], { state: "in_flight", leaseUntil: Date.now() + 60_000 })
  );
  if (claimed === null) return;
  queue.push({ ...job, versionstamp: claimed });
  idle.pop()?.();
}

/** The bare's message: the fields as lines under fixed headers, CRLF-ended. */
function bareMessage(job: Job): string {
  const text = Object.entries(job.envelope.fields).map(([name, value]) => `${name}: ${value}`)
    .join("\r\n");
  return `From: forms@tenant.example\r\nTo: owner@tenant.example\r\nSubject: New submission\r\n` +
    `Message-ID: <${job.id}@bare.example>\r\nMIME-Version: 1.0\r\n` +
    `Content-Type: text/plain; charset=utf-8\r\n\r\n${text}\r\n`;
}

/** One SMTP session: lines in, replies counted. */
async function session() {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: Number(smtpPortText) });
  conn.setNoDelay(true);
  const chunk = new Uint8Array(4096);
  let pending = "";
  async function replies(count: number): Promise<number[]> {
    const codes: number[] = [];
    while (codes.length < count) {
      let end;
      while ((end = pending.indexOf("\r\n")) >= 0) {
        const line = pending.slice(0, end);
        pending = pending.slice(end + 2);
        if (line[3] !== "-") codes.push(Number(line.slice(0, 3)));
      }
      if (codes.length >= count) break;
      const n = await conn.read(chunk);
      if (n === null) throw new Error("SMTP connection closed");
      pending += decoder.decode(chunk.subarray(0, n));
    }
    return codes;
  }
  const write = async (text: string) => {
    const bytes = encoder.encode(text);
    for (let at = 0; at < bytes.length;) at += await conn.write(bytes.subarray(at));
  };
  await replies(1);
  await write("EHLO bare.example\r\n");
  await replies(1);
  await write(`AUTH PLAIN ${btoa(`\0${user}\0${password}`)}\r\n`);
  if ((await replies(1))[0] !== 235) throw new Error("AUTH refused");
  for (;;) {
    const job = queue.shift();
    if (job === undefined) {
      await new Promise<void>((wake) => idle.push(wake));
      continue;
    }
    const started = performance.now();
    await write("MAIL FROM:<forms@tenant.example>\r\nRCPT TO:<owner@tenant.example>\r\nDATA\r\n");
    const [mail, rcpt, data] = await replies(3);
    if (mail !== 250 || rcpt !== 250 || data !== 354) throw new Error("SMTP refused");
    const message = contract?.message(job) ?? bareMessage(job);
    await write(`${message.replace(/^\./gm, "..")}.\r\n`);
    if ((await replies(1))[0] !== 250) throw new Error("message refused");
    contract?.attempted(job, started);
    commit((op) =>
      op.check({ key: ["job", job.id], versionstamp: job.versionstamp })
        .delete(["job", job.id]).delete(["envelope", job.id])
        .set(["outcome", job.id], { status: "delivered", at: Date.now() }, {
          expireIn: OUTCOME_TTL_MS,
        })
    );
  }
}
for (let i = 0; i < SESSIONS; i++) session();
