import assert from "node:assert/strict";
import { loadConfig } from "../config.ts";
import { startService } from "../service.ts";
import { createOrg } from "../store/orgs.ts";
import { countKeys } from "./helpers/kv.ts";
import { startServiceProcess } from "./helpers/process.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

Deno.test("a process killed mid-delivery and restarted on the same KV file finishes every job", async () => {
  const dir = await Deno.makeTempDir();
  const env = {
    KV_PATH: `${dir}/formrelay.kv`,
    DELIVERY_LEASE_MS: "1500",
    HTTP_TIMEOUT_MS: "1000",
    RETRY_SCHEDULE_SECONDS: "0.05,0.05,0.05,0.05,0.05,0.05,0.05,0.05",
    SWEEP_INTERVAL_SECONDS: "0.2",
  };
  // Set up the org, form and destination through the store, then close the KV.
  const setup = await startService(
    { ...loadConfig({ ...env, LOG_LEVEL: "silent" }) },
    { deliver: false },
  );
  const { tenantKey } = await createOrg(setup.db, "Restart org");
  await setup.close();

  // Phase 1: the receiver takes requests and never answers, so deliveries are in flight.
  let answering = false;
  let releaseHung!: () => void;
  const hung = new Promise<void>((resolve) => releaseHung = resolve);
  await using sink = startWebhookSink(async () => {
    if (!answering) {
      await hung;
      return new Response("too late", { status: 503 });
    }
    return new Response("ok");
  });

  const first = await startServiceProcess(env);
  const accepted = new Set<string>();
  try {
    const admin = (path: string, body?: unknown) =>
      fetch(`${first.origin}/v1/admin${path}`, {
        method: body === undefined ? "GET" : "POST",
        headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      }).then((r) => r.json());
    const { form } = await admin("/forms", { name: "Restart" });
    await admin(`/forms/${form.id}/destinations`, { type: "webhook", config: { url: sink.url } });
    for (let i = 0; i < 40; i++) {
      const response = await fetch(`${first.origin}/v1/f/${form.publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ i }),
      });
      assert.equal(response.status, 202);
      accepted.add((await response.json()).submissionId);
    }
    await waitFor(() => sink.hits >= 10, { message: "deliveries in flight" });
  } finally {
    await first.kill("SIGKILL");
  }

  // Phase 2: a new process on the same file, the receiver now answers.
  answering = true;
  releaseHung();
  const second = await startServiceProcess(env);
  try {
    await waitFor(
      () => new Set(sink.received.map((r) => r.json?.submissionId)).size === accepted.size,
      { message: () => `${sink.received.length} of ${accepted.size} delivered`, timeoutMs: 30_000 },
    );
    const delivered = new Set(sink.received.map((r) => r.json?.submissionId as string));
    assert.deepEqual(delivered, accepted);
  } finally {
    await second.kill("SIGTERM");
  }

  const after = await startService({ ...loadConfig({ ...env, LOG_LEVEL: "silent" }) }, {
    deliver: false,
  });
  try {
    for (const prefix of ["jobs", "envelopes"]) {
      const left = await countKeys(after.db.kv, prefix);
      assert.equal(left, 0, `${prefix} left behind`);
    }
  } finally {
    await after.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a service that stops writes the visitor counts it kept to itself: the next one on the KV file holds a client to the limit", async () => {
  const dir = await Deno.makeTempDir();
  const env = {
    KV_PATH: `${dir}/formrelay.kv`,
    RATE_LIMIT_MAX: "6",
    CLIENT_IP_HEADER: "x-forwarded-for",
    LOG_LEVEL: "silent",
  };
  const start = () => startService(loadConfig(env));
  const first = await start();
  const { tenantKey } = await createOrg(first.db, "Rate org");
  const created = await first.app.request("/v1/admin/forms", {
    method: "POST",
    headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
    body: JSON.stringify({ name: "Rate" }),
  });
  const { form } = await created.json();
  const post = async (service: { app: { request: typeof first.app.request } }) => {
    const response = await service.app.request(`/v1/f/${form.publicKey}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-forwarded-for": "198.51.100.20" },
      body: "{}",
    });
    await response.body?.cancel();
    return response.status;
  };
  for (let i = 0; i < 2; i++) assert.equal(await post(first), 202);
  // Alone on its KV, the service kept the count of 2 (under half the limit) to itself.
  assert.equal(await countKeys(first.db.kv, "rate"), 0);
  await first.close();

  const second = await start();
  try {
    let accepted = 0;
    for (let i = 0; i < 10; i++) if (await post(second) === 202) accepted++;
    assert.ok(accepted >= 4, `${accepted}: at least the 4 left`);
    assert.ok(accepted <= 5, `${accepted} let through after the restart: 4 left, one more`);
  } finally {
    await second.close();
    await Deno.remove(dir, { recursive: true });
  }
});
