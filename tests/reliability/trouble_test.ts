/**
 * Reliability 2: destinations in trouble. One form delivers to two healthy destinations
 * (a webhook, an SMTP relay) and five troubled ones: a receiver down for a minute, one
 * answering 503 with Retry-After, one hanging past the time-out, one resetting the
 * connection mid-body, and an SMTP relay answering 421 and hanging up. The healthy ones
 * keep their latency; the troubled ones get everything once they recover; nothing is lost
 * and nothing arrives twice.
 */
import assert from "node:assert/strict";
import { type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink, type WebhookSink } from "../helpers/sink.ts";
import { startSmtpServer } from "../helpers/smtp_server.ts";
import { waitFor } from "../helpers/wait.ts";
import {
  adminClient,
  createFormWith,
  findPlaintext,
  loopbackSmtpConfig,
  percentile,
  prepareWorkspace,
  submit,
} from "./helpers/cluster.ts";
import { startTcpPeer } from "./helpers/peers.ts";

const BASELINE = 60;
const DURING = 150;
/** How long the 503, hanging, resetting and 421 peers stay in trouble. */
const TROUBLE_MS = 20_000;
/** How long the down receiver stays down. */
const DOWN_MS = Number(Deno.env.get("TROUBLE_DOWN_MS") ?? 60_000);
const RETRY_AFTER_SECONDS = 2;

Deno.test("troubled destinations deliver once they recover while healthy ones keep their latency", async () => {
  const workspace = await prepareWorkspace(1);
  const marker = `trouble-marker-${crypto.randomUUID()}`;
  let troubled = false;
  /** Copies received with a 2xx, by destination name then webhook-id / submission id. */
  const got = new Map<string, Map<string, number[]>>();
  const note = (name: string, id: string | null, at = Date.now()) => {
    if (id === null) return;
    const byId = got.get(name) ?? new Map<string, number[]>();
    got.set(name, byId);
    byId.set(id, [...(byId.get(id) ?? []), at]);
  };
  /** Every attempt at the 503 peer, by webhook-id, to check Retry-After was honoured. */
  const attemptsAt503 = new Map<string, number[]>();
  const releaseHung = Promise.withResolvers<void>();

  const healthy = startWebhookSink((r) => {
    note("healthy", r.headers.get("webhook-id"));
    return new Response("ok");
  });
  const downAnswer = (r: { headers: Headers }) => {
    note("down", r.headers.get("webhook-id"));
    return new Response("ok");
  };
  let down: WebhookSink = startWebhookSink(downAnswer);
  const downPort = Number(new URL(down.url).port);
  const unavailable = startWebhookSink((r) => {
    const id = r.headers.get("webhook-id")!;
    attemptsAt503.set(id, [...(attemptsAt503.get(id) ?? []), Date.now()]);
    if (troubled) {
      return new Response("busy", {
        status: 503,
        headers: { "retry-after": String(RETRY_AFTER_SECONDS) },
      });
    }
    note("503", id);
    return new Response("ok");
  });
  const hanging = startWebhookSink(async (r) => {
    if (troubled) {
      await releaseHung.promise;
      return new Response("late", { status: 503 });
    }
    note("hang", r.headers.get("webhook-id"));
    return new Response("ok");
  });
  const behindReset = startWebhookSink((r) => {
    note("reset", r.headers.get("webhook-id"));
    return new Response("ok");
  });
  // Reads a little of the request, then closes with the rest unread: a TCP reset.
  const resetting = await startTcpPeer(Number(new URL(behindReset.url).port), async (conn) => {
    if (!troubled) return "pass";
    await conn.read(new Uint8Array(64));
    return "close";
  });
  const smtpHealthy = await startSmtpServer({ mode: "off" });
  const smtpBehind = await startSmtpServer({ mode: "off" });
  let smtpConnections = 0;
  // 421 at the greeting, or after EHLO, then hang up.
  const smtp421 = await startTcpPeer(smtpBehind.port, async (conn) => {
    if (!troubled) return "pass";
    const encoder = new TextEncoder();
    if (smtpConnections++ % 2 === 1) {
      await conn.write(encoder.encode("220 localhost ESMTP\r\n"));
      await conn.read(new Uint8Array(512));
    }
    await conn.write(encoder.encode("421 4.3.2 Service shutting down, closing channel\r\n"));
    return "close";
  });

  let service: ServiceProcess | null = null;
  const timers: ReturnType<typeof setTimeout>[] = [];
  try {
    service = await startServiceProcess(workspace.env, { stderr: "piped" });
    const origin = service.origin;
    const admin = adminClient(() => origin, workspace.orgs[0].tenantKey);
    const names = ["healthy", "smtp", "down", "503", "hang", "reset", "421"];
    const form = await createFormWith(admin, "Trouble", [
      { type: "webhook", config: { url: healthy.url } },
      { type: "smtp", config: loopbackSmtpConfig(smtpHealthy.port) },
      { type: "webhook", config: { url: down.url } },
      { type: "webhook", config: { url: unavailable.url } },
      { type: "webhook", config: { url: hanging.url } },
      { type: "webhook", config: { url: `http://127.0.0.1:${resetting.port}/hook` } },
      { type: "smtp", config: loopbackSmtpConfig(smtp421.port) },
    ]);
    const nameOf = new Map(form.destinationIds.map((id, i) => [id, names[i]]));
    const sentAt = new Map<string, number>();
    const send = async (count: number, perSecond: number) => {
      const ids: string[] = [];
      const start = Date.now();
      await Promise.all(Array.from({ length: count }, async (_, i) => {
        await new Promise((r) => setTimeout(r, (i * 1000) / perSecond));
        const at = Date.now();
        const result = await submit(origin, form.publicKey, { marker, i, email: "a@b.example" });
        assert.equal(result.status, 202);
        sentAt.set(result.submissionId!, at);
        ids.push(result.submissionId!);
      }));
      return { ids, ms: Date.now() - start };
    };
    /** Latency of a healthy destination: arrival minus the moment the submission was sent. */
    const latencies = (name: string, ids: string[], destinationId: string) =>
      ids.map((id) => got.get(name)!.get(`${id}.${destinationId}`)![0] - sentAt.get(id)!);
    const smtpNoted = { healthy: 0, behind: 0 };
    const collectSmtp = () => {
      for (const [server, name] of [[smtpHealthy, "smtp"], [smtpBehind, "421"]] as const) {
        const key = name === "smtp" ? "healthy" : "behind";
        for (const message of server.messages.slice(smtpNoted[key])) {
          const id = /^Submission ID: ([0-9a-f-]{36})/m.exec(message.raw)?.[1] ?? null;
          const destinationId = form.destinationIds[names.indexOf(name)];
          note(name, id && `${id}.${destinationId}`, message.receivedAt);
        }
        smtpNoted[key] = server.messages.length;
      }
    };
    const arrived = (ids: string[], which: string[]) => {
      collectSmtp();
      let missing = 0;
      for (const id of ids) {
        for (const name of which) {
          const destinationId = form.destinationIds[names.indexOf(name)];
          if (!got.get(name)?.has(`${id}.${destinationId}`)) missing++;
        }
      }
      return missing;
    };

    // Baseline: everyone healthy.
    const baseline = await send(BASELINE, 20);
    await waitFor(() => arrived(baseline.ids, names) === 0, {
      timeoutMs: 20_000,
      message: () => `${arrived(baseline.ids, names)} baseline deliveries missing`,
    });

    // Trouble: the down receiver goes away for a minute, the others misbehave for 20 s.
    troubled = true;
    const troubleStart = Date.now();
    await down.close();
    timers.push(setTimeout(() => {
      down = startWebhookSink(downAnswer, { port: downPort });
    }, DOWN_MS));
    timers.push(setTimeout(() => {
      troubled = false;
      releaseHung.resolve();
    }, TROUBLE_MS));
    const during = await send(DURING, 10);
    await waitFor(() => arrived(during.ids, ["healthy", "smtp"]) === 0, {
      timeoutMs: 20_000,
      message: () => `${arrived(during.ids, ["healthy", "smtp"])} healthy deliveries missing`,
    });
    const all = [...baseline.ids, ...during.ids];
    await waitFor(() => arrived(all, names) === 0, {
      timeoutMs: DOWN_MS + 60_000,
      message: () =>
        "deliveries missing: " +
        names.map((name) => `${name} ${arrived(all, [name])}`).join(", "),
    });
    const recoveredIn = Date.now() - troubleStart;

    const figures = (name: string) => {
      const destinationId = form.destinationIds[names.indexOf(name)];
      const before = latencies(name, baseline.ids, destinationId);
      const under = latencies(name, during.ids, destinationId);
      return {
        before: { p50: percentile(before, 50), p99: percentile(before, 99) },
        under: { p50: percentile(under, 50), p99: percentile(under, 99) },
      };
    };
    const webhookLatency = figures("healthy");
    const smtpLatency = figures("smtp");
    const copies = names.map((name) => {
      const counts = [...(got.get(name)?.values() ?? [])].map((at) => at.length);
      return { name, delivered: counts.length, duplicates: counts.filter((n) => n > 1).length };
    });
    const gaps = [...attemptsAt503.values()].flatMap((times) =>
      times.slice(1).map((t, i) => t - times[i])
    );
    const outcomes = await admin("GET", `/forms/${form.formId}/deliveries?limit=500`);
    const failed = outcomes.body.deliveries.filter((d: { status: string }) =>
      d.status === "failed"
    );
    console.log(
      `trouble figures: ${all.length} submissions × ${names.length} destinations; ` +
        `healthy webhook latency p50/p99 ${webhookLatency.before.p50}/${webhookLatency.before.p99} ms ` +
        `before, ${webhookLatency.under.p50}/${webhookLatency.under.p99} ms during trouble; ` +
        `healthy SMTP ${smtpLatency.before.p50}/${smtpLatency.before.p99} ms before, ` +
        `${smtpLatency.under.p50}/${smtpLatency.under.p99} ms during; everything delivered ` +
        `${recoveredIn} ms after the trouble began; per destination ` +
        copies.map((c) => `${c.name} ${c.delivered} (dup ${c.duplicates})`).join(", ") +
        `; shortest gap between attempts at the 503 peer ${Math.min(...gaps)} ms`,
    );
    for (const c of copies) {
      assert.equal(c.delivered, all.length, `${c.name}: delivered`);
      assert.equal(c.duplicates, 0, `${c.name}: duplicates`);
    }
    assert.deepEqual(failed.map((d: { destinationId: string }) => nameOf.get(d.destinationId)), []);
    // Healthy destinations keep their latency: p99 under trouble within a second, and no
    // worse than three times the baseline's plus 200 ms.
    for (const latency of [webhookLatency, smtpLatency]) {
      assert.ok(latency.under.p99 < 1000, `p99 ${latency.under.p99} ms under trouble`);
      assert.ok(latency.under.p99 <= 3 * latency.before.p99 + 200, "p99 grew under trouble");
    }
    // Retry-After was honoured (the schedule's own first steps are shorter).
    assert.ok(gaps.length > 0 && Math.min(...gaps) >= RETRY_AFTER_SECONDS * 1000 - 50);

    await service.kill("SIGTERM");
    const logs = [...service.lines, ...service.stderrLines];
    assert.deepEqual(await findPlaintext(marker, { dir: workspace.dir, logs }), []);
    assert.deepEqual(logs.filter((line) => line.includes('"level":"error"')), []);
  } finally {
    for (const timer of timers) clearTimeout(timer);
    releaseHung.resolve();
    await service?.kill("SIGKILL");
    for (const sink of [healthy, down, unavailable, hanging, behindReset]) await sink.close();
    await resetting.close();
    await smtp421.close();
    await smtpHealthy.close();
    await smtpBehind.close();
    await workspace.remove();
  }
});
