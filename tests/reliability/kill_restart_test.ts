/**
 * Reliability 1: the service under load is SIGKILLed three times at random points and
 * restarted on the same KV file. Every submission answered 202 reaches every destination
 * (two webhooks, one SMTP relay), and nothing arrives twice except deliveries that were
 * in flight when a kill landed (at-least-once: the receiver had it, the service had not
 * recorded it).
 */
import assert from "node:assert/strict";
import { deliveredBy, type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { countKeys } from "../helpers/kv.ts";
import { startSmtpServer } from "../helpers/smtp_server.ts";
import { waitFor } from "../helpers/wait.ts";
import { loadConfig } from "../../config.ts";
import { startService } from "../../service.ts";
import {
  adminClient,
  createFormWith,
  findPlaintext,
  loopbackSmtpConfig,
  prepareWorkspace,
  submit,
} from "./helpers/cluster.ts";

const ATTEMPTS = 3000;
const WORKERS = 16;
const RATE_PER_SECOND = 250;
const KILLS = 3;
/** A first copy that arrived this long before a kill, unrecorded, was in flight. */
const KILL_WINDOW_MS = 2000;

/** One copy of a delivery as a receiver saw it. */
interface Arrival {
  /** `<submissionId>.<destinationId>` */
  key: string;
  submissionId: string;
  destinationId: string;
  at: number;
}

Deno.test("SIGKILL at three random points under load: every 202 delivered to every destination, duplicates only from interrupted deliveries", async () => {
  const workspace = await prepareWorkspace(1);
  const marker = `kill-marker-${crypto.randomUUID()}`;
  const arrivals: Arrival[] = [];
  const record = (key: string | null, at: number) => {
    if (key === null) return;
    const dot = key.lastIndexOf(".");
    arrivals.push({ key, submissionId: key.slice(0, dot), destinationId: key.slice(dot + 1), at });
  };
  const hooks = [0, 1].map(() =>
    startWebhookSink((received) => {
      record(received.headers.get("webhook-id"), Date.now());
      return new Response("ok");
    })
  );
  const smtp = await startSmtpServer({ mode: "off" });
  const processes: { process: ServiceProcess; startedAt: number; killedAt: number | null }[] = [];
  try {
    const startedAt = Date.now();
    let current = await startServiceProcess(workspace.env, { stderr: "piped" });
    processes.push({ process: current, startedAt, killedAt: null });
    const admin = adminClient(() => current.origin, workspace.orgs[0].tenantKey);
    const form = await createFormWith(admin, "Kill and restart", [
      { type: "webhook", config: { url: hooks[0].url } },
      { type: "webhook", config: { url: hooks[1].url } },
      { type: "smtp", config: loopbackSmtpConfig(smtp.port) },
    ]);
    const smtpDestinationId = form.destinationIds[2];

    // The load: ATTEMPTS submissions paced at RATE_PER_SECOND by WORKERS; while the
    // service is down a worker waits for the next one to listen.
    let up = Promise.withResolvers<void>();
    up.resolve();
    const accepted = new Set<string>();
    let refused = 0;
    let otherStatus = 0;
    let next = 0;
    const loadStart = Date.now();
    const workers = Array.from({ length: WORKERS }, async () => {
      while (next < ATTEMPTS) {
        const i = next++;
        const due = loadStart + (i * 1000) / RATE_PER_SECOND;
        if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
        await up.promise;
        try {
          const result = await submit(current.origin, form.publicKey, {
            marker,
            i,
            email: "ada@example.org",
          });
          if (result.submissionId !== null) accepted.add(result.submissionId);
          else otherStatus++;
        } catch {
          refused++; // killed: no answer, so not accepted (it may still have been stored)
          await up.promise;
        }
      }
    });

    // The chaos: each process lives a random 1.5–3.5 s of the load, then gets SIGKILL.
    for (let k = 0; k < KILLS; k++) {
      await new Promise((r) => setTimeout(r, 1500 + Math.random() * 2000));
      up = Promise.withResolvers<void>();
      await current.kill("SIGKILL");
      // Taken once the process is gone: requests on the wire at the kill arrive up to here.
      processes[processes.length - 1].killedAt = Date.now();
      const restartedAt = Date.now();
      current = await startServiceProcess(workspace.env, { stderr: "piped" });
      processes.push({ process: current, startedAt: restartedAt, killedAt: null });
      up.resolve();
    }
    await Promise.all(workers);

    const destinations = form.destinationIds;
    // SMTP copies are told apart by their submission (one SMTP destination here).
    let smtpSeen = 0;
    const smtpKeys = () => {
      for (const message of smtp.messages.slice(smtpSeen)) {
        const submissionId = /^Submission ID: ([0-9a-f-]{36})/m.exec(message.raw)?.[1] ?? null;
        record(submissionId && `${submissionId}.${smtpDestinationId}`, message.receivedAt);
      }
      smtpSeen = smtp.messages.length;
    };
    const missing = () => {
      smtpKeys();
      const seen = new Set(arrivals.map((a) => a.key));
      let count = 0;
      for (const id of accepted) {
        for (const d of destinations) if (!seen.has(`${id}.${d}`)) count++;
      }
      return count;
    };
    await waitFor(() => missing() === 0, {
      timeoutMs: 120_000,
      message: () => `${missing()} deliveries of ${accepted.size * 3} still missing`,
    });
    // Every job ends, submissions whose 202 a kill swallowed included, and every envelope
    // goes (cleanups a kill cut short are finished by the sweep once a lease has passed).
    const watch = await Deno.openKv(workspace.env.KV_PATH);
    const count = (prefix: string) => countKeys(watch, prefix);
    try {
      await waitFor(async () => await count("jobs") === 0 && await count("envelopes") === 0, {
        timeoutMs: 60_000,
        message: () => "jobs or envelopes still in KV",
      });
    } catch {
      // The assertions below report what was left.
    } finally {
      watch.close();
    }
    await current.kill("SIGTERM");

    // What is left in KV: jobs and envelopes must be none.
    const left = { jobs: 0, envelopes: new Set<string>() };
    const after = await startService(loadConfig({ ...workspace.env, LOG_LEVEL: "silent" }), {
      deliver: false,
    });
    try {
      left.jobs = await countKeys(after.db.kv, "jobs");
      for await (const entry of after.db.kv.list({ prefix: ["envelopes"] })) {
        left.envelopes.add(String(entry.key[2]));
      }
    } finally {
      await after.close();
    }
    smtpKeys();

    // Duplicates: the earlier copy must have arrived within the kill window of a process
    // that had not recorded it as delivered; anything else is a real duplicate.
    const byKey = new Map<string, Arrival[]>();
    for (const arrival of arrivals) {
      const list = byKey.get(arrival.key) ?? [];
      list.push(arrival);
      byKey.set(arrival.key, list);
    }
    const recordedBy = processes.map(({ process }) => deliveredBy(process));
    let interrupted = 0;
    const others: string[] = [];
    for (const [key, copies] of byKey) {
      copies.sort((a, b) => a.at - b.at);
      for (let c = 1; c < copies.length; c++) {
        const earlier = copies[c - 1].at;
        const inFlight = processes.some((p, g) =>
          p.killedAt !== null && earlier >= p.startedAt && earlier <= p.killedAt &&
          p.killedAt - earlier <= KILL_WINDOW_MS && !recordedBy[g].has(key)
        );
        if (inFlight) interrupted++;
        else others.push(`${key} at ${copies.map((x) => x.at).join(", ")}`);
      }
    }
    const deliveredPer = destinations.map((d) =>
      [...accepted].filter((id) => byKey.has(`${id}.${d}`)).length
    );
    const notAccepted = new Set(
      arrivals.filter((a) => !accepted.has(a.submissionId)).map((a) => a.submissionId),
    );
    const lost = accepted.size * destinations.length - deliveredPer.reduce((a, b) => a + b, 0);
    console.log(
      `kill/restart figures: attempts ${ATTEMPTS}, accepted (202) ${accepted.size}, ` +
        `no answer (killed) ${refused}, other status ${otherStatus}; delivered per destination ` +
        `webhook A ${deliveredPer[0]}, webhook B ${deliveredPer[1]}, smtp ${deliveredPer[2]}; ` +
        `duplicates: interrupted ${interrupted}, other ${others.length}; lost ${lost}; ` +
        `submissions delivered whose 202 was lost in a kill: ${notAccepted.size}; ` +
        `kills at ${processes.filter((p) => p.killedAt).map((p) => p.killedAt! - loadStart)} ms; ` +
        `left in KV: ${left.jobs} jobs, ${left.envelopes.size} envelopes ` +
        `(of accepted submissions: ${[...left.envelopes].filter((id) => accepted.has(id)).length})`,
    );
    assert.ok(accepted.size >= ATTEMPTS * 0.7, `only ${accepted.size} accepted`);
    assert.equal(lost, 0, "lost deliveries");
    assert.deepEqual(others, [], "duplicates not explained by a kill");
    assert.equal(left.jobs, 0, "jobs left behind");
    assert.deepEqual([...left.envelopes], [], "sealed envelopes left behind after every delivery");

    // Nothing of the payloads in plaintext: not in the KV file, not in any log line.
    const logs = processes.flatMap(({ process }) => [...process.lines, ...process.stderrLines]);
    assert.deepEqual(await findPlaintext(marker, { dir: workspace.dir, logs }), []);
    assert.deepEqual(logs.filter((line) => line.includes('"msg":"unhandled error"')), []);
  } finally {
    for (const { process } of processes) await process.kill("SIGKILL");
    for (const hook of hooks) await hook.close();
    await smtp.close();
    await workspace.remove();
  }
});
