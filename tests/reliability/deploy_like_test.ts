/**
 * Reliability: a Deploy-like run. Four processes share one KV file with queues switched
 * off (KV_QUEUES=false) and a sweep every half second, as isolates on Deno Deploy share
 * the project's KV with a cron sweep. For a minute, under a steady load of one-off
 * visitors and one address posting again and again, a random process is SIGKILLed every
 * few seconds and a new one started in its place. Every submission answered 202 reaches
 * the webhook and the Discord receiver; a copy arrives twice only when a kill
 * interrupted the attempt that sent it first; the repeating address is let through at
 * most the documented bound (the limit + each process it reached − 1); nothing is left in KV.
 */
import assert from "node:assert/strict";
import { deliveredBy, type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { countKeys } from "../helpers/kv.ts";
import { waitFor } from "../helpers/wait.ts";
import { adminClient, createFormWith, prepareWorkspace, submit } from "./helpers/cluster.ts";

const PROCESSES = 4;
const LOAD_SECONDS = 60;
/**
 * Within what the chat destination takes: Discord's documented pace (a message every
 * 500 ms, at most 10 submissions each) is 20 a second for the whole deployment, the
 * processes sharing it. At 20 visitors a second (and kills taking a process's turns) the
 * chat deliveries fell behind into the retry schedule and 560–602 of 1 233 had not
 * arrived 2 minutes after the load: the pace held, the test's load did not fit in it.
 */
const VISITORS_PER_SECOND = 8;
/** The repeating address posts this often; RATE_LIMIT_MAX below is its limit. */
const REPEATER_PER_SECOND = 2;
const RATE_LIMIT = 20;
/** A first copy that arrived this long before a kill, unrecorded, was in flight. */
const KILL_WINDOW_MS = 2000;

/** Calls `each(i)` `perSecond` times a second until `until`; settles when all calls have. */
async function steady(perSecond: number, until: number, each: (i: number) => Promise<unknown>) {
  const start = Date.now();
  const calls: Promise<unknown>[] = [];
  for (let i = 0; Date.now() < until; i++) {
    const due = start + (i * 1000) / perSecond;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
    calls.push(each(i));
  }
  await Promise.all(calls);
}

interface Life {
  process: ServiceProcess;
  startedAt: number;
  killedAt: number | null;
}

Deno.test("Deploy-like: four processes, no queues, random SIGKILLs for a minute: every 202 delivered, repeats only from interrupted attempts, the rate limit within its bound", async () => {
  const workspace = await prepareWorkspace(1, {
    KV_QUEUES: "false",
    SWEEP_INTERVAL_SECONDS: "0.5",
    RATE_LIMIT_MAX: String(RATE_LIMIT),
    RATE_LIMIT_WINDOW_SECONDS: "600",
    CLIENT_IP_HEADER: "x-forwarded-for",
  });
  const webhookArrivals: { key: string; at: number }[] = [];
  const hook = startWebhookSink((received) => {
    webhookArrivals.push({ key: received.headers.get("webhook-id") ?? "", at: Date.now() });
    return new Response("ok");
  });
  // A Discord-like receiver: 204 for every message, recorded with its time.
  const chatMessages: { body: string; at: number }[] = [];
  const chat = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    chatMessages.push({ body: await request.text(), at: Date.now() });
    return new Response(null, { status: 204 });
  });
  const lives: Life[] = [];
  const live: Life[] = [];
  try {
    for (let i = 0; i < PROCESSES; i++) {
      const life = { process: await startServiceProcess(workspace.env), startedAt: Date.now() };
      lives.push({ ...life, killedAt: null });
      live.push(lives.at(-1)!);
    }
    const admin = adminClient(() => live[0].process.origin, workspace.orgs[0].tenantKey);
    const form = await createFormWith(admin, "Deploy-like", [
      { type: "webhook", config: { url: `${hook.url}/a` } },
      {
        type: "discord",
        config: { url: `http://127.0.0.1:${chat.addr.port}/api/webhooks/1/token` },
      },
    ]);
    const webhookId = form.destinationIds[0];

    // The load: visitors and the repeating address, each post to a live process in turn.
    const accepted = new Map<string, string>(); // submission id → its token
    /** The repeating address's 202s by rate-limit window (the windows are fixed, 10 minutes). */
    const repeaterAccepted = new Map<number, number>();
    let unanswered = 0;
    let turn = 0;
    const loadEnd = Date.now() + LOAD_SECONDS * 1000;
    const post = async (token: string, address: string): Promise<boolean> => {
      const origin = live[turn++ % live.length].process.origin;
      try {
        const result = await submit(origin, form.publicKey, { token }, {
          "x-forwarded-for": address,
        });
        if (result.submissionId !== null) accepted.set(result.submissionId, token);
        return result.submissionId !== null;
      } catch {
        unanswered++; // killed under it: not accepted (it may still have been stored)
        return false;
      }
    };
    const visitors = steady(
      VISITORS_PER_SECOND,
      loadEnd,
      (i) => post(`tok${String(i).padStart(6, "0")}x`, `198.51.${(i >> 8) & 255}.${i & 255}`),
    );
    const repeater = steady(REPEATER_PER_SECOND, loadEnd, async (i) => {
      if (await post(`rep${String(i).padStart(6, "0")}x`, "203.0.113.9")) {
        const window = Math.floor(Date.now() / 600_000);
        repeaterAccepted.set(window, (repeaterAccepted.get(window) ?? 0) + 1);
      }
    });

    // The chaos: every 2–6 s a random live process is SIGKILLed and a new one started.
    while (Date.now() < loadEnd - 2000) {
      await new Promise((r) => setTimeout(r, 2000 + Math.random() * 4000));
      const victim = live.splice(Math.floor(Math.random() * live.length), 1)[0];
      await victim.process.kill("SIGKILL");
      victim.killedAt = Date.now();
      const fresh = { process: await startServiceProcess(workspace.env), startedAt: Date.now() };
      lives.push({ ...fresh, killedAt: null });
      live.push(lives.at(-1)!);
    }
    await Promise.all([visitors, repeater]);

    // Every accepted submission at both receivers.
    const tokensIn = (body: string) => body.match(/(tok|rep)\d{6}x/g) ?? [];
    const missingFrom = () => {
      const hooked = new Set(webhookArrivals.map((a) => a.key));
      const chatted = new Set(chatMessages.flatMap((m) => tokensIn(m.body)));
      const count = { webhook: 0, chat: 0 };
      for (const [id, token] of accepted) {
        if (!hooked.has(`${id}.${webhookId}`)) count.webhook++;
        if (!chatted.has(token)) count.chat++;
      }
      return count;
    };
    const missing = () => missingFrom().webhook + missingFrom().chat;
    await waitFor(() => missing() === 0, {
      timeoutMs: 120_000,
      message: () =>
        `${missing()} deliveries of ${accepted.size * 2} still missing ` +
        `(${JSON.stringify(missingFrom())}; chat messages ${chatMessages.length})`,
    });
    const watch = await Deno.openKv(workspace.env.KV_PATH);
    try {
      await waitFor(async () => await countKeys(watch, "jobs") === 0, {
        timeoutMs: 60_000,
        message: "jobs left in KV",
      });
    } finally {
      watch.close();
    }

    // Webhook repeats: the earlier copy arrived shortly before a kill of a process that
    // had not recorded it.
    const recordedBy = lives.map(({ process }) => deliveredBy(process));
    const killedWithin = (at: number, unrecorded: (life: number) => boolean) =>
      lives.some((life, g) =>
        life.killedAt !== null && at >= life.startedAt && at <= life.killedAt &&
        life.killedAt - at <= KILL_WINDOW_MS && unrecorded(g)
      );
    const byKey = Map.groupBy(webhookArrivals, (a) => a.key);
    let webhookRepeats = 0;
    const unexplained: string[] = [];
    for (const [key, copies] of byKey) {
      for (let c = 1; c < copies.length; c++) {
        webhookRepeats++;
        if (!killedWithin(copies[c - 1].at, (g) => !recordedBy[g].has(key))) unexplained.push(key);
      }
    }
    // Chat repeats: chat services give no id to drop a repeat by; a token seen twice must
    // have been first sent shortly before a kill.
    const firstSeen = new Map<string, number>();
    let chatRepeats = 0;
    const chatUnexplained: string[] = [];
    for (const message of chatMessages) {
      for (const token of tokensIn(message.body)) {
        const first = firstSeen.get(token);
        if (first === undefined) firstSeen.set(token, message.at);
        else {
          chatRepeats++;
          if (!killedWithin(first, () => true)) chatUnexplained.push(token);
        }
      }
    }
    const incarnations = lives.length;
    console.log(
      `deploy-like figures: ${lives.length - PROCESSES} kills, accepted ${accepted.size} ` +
        `(no answer ${unanswered}); webhook repeats ${webhookRepeats} (unexplained ` +
        `${unexplained.length}); chat messages ${chatMessages.length}, submissions repeated ` +
        `in chat ${chatRepeats} (unexplained ${chatUnexplained.length}); repeating address ` +
        `let through ${[...repeaterAccepted.values()].join(" and ")} in its window(s), limit ` +
        `${RATE_LIMIT} (bound ${RATE_LIMIT + incarnations - 1} for ${incarnations} processes)`,
    );
    assert.ok(accepted.size >= LOAD_SECONDS * VISITORS_PER_SECOND * 0.7, "too few accepted");
    assert.deepEqual(unexplained, [], "webhook copies not explained by a kill");
    assert.deepEqual(chatUnexplained, [], "chat repeats not explained by a kill");
    const most = Math.max(...repeaterAccepted.values());
    assert.ok(most >= RATE_LIMIT, `the limit is given (${most})`);
    for (const passed of repeaterAccepted.values()) {
      assert.ok(
        passed <= RATE_LIMIT + incarnations - 1,
        `${passed} let through in a window: past the limit + ${incarnations} processes − 1`,
      );
    }
  } finally {
    for (const { process } of lives) await process.kill("SIGKILL");
    await hook.close();
    await chat.shutdown();
    await workspace.remove();
  }
});
