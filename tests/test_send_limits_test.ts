/**
 * Test sends are limited for the whole deployment: two service instances on one KV file
 * share one limit per organization (submission test sends and notification tests alike).
 */
import assert from "node:assert/strict";
import { loadConfig } from "../config.ts";
import { type Service, startService } from "../service.ts";
import { createOrg } from "../store/orgs.ts";
import { takeTestSend } from "../store/test_send_limits.ts";
import { startWebhookSink } from "./helpers/sink.ts";

async function twoInstances(dir: string, env: Record<string, string>): Promise<Service[]> {
  const config = loadConfig({
    KV_PATH: `${dir}/formrelay.kv`,
    ALLOW_PRIVATE_DESTINATIONS: "true",
    LOG_LEVEL: "silent",
    ...env,
  });
  return [await startService(config), await startService(config)];
}

function admin(service: Service, tenantKey: string, method: string, path: string, body?: unknown) {
  return service.app.request(`/v1/admin${path}`, {
    method,
    headers: {
      "x-tenant-key": tenantKey,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

Deno.test("two instances on one KV file allow one organization's test send limit, not two", async () => {
  const dir = await Deno.makeTempDir();
  await using sink = startWebhookSink();
  const services = await twoInstances(dir, {
    TEST_SENDS_PER_ORG: "4",
    TEST_SENDS_PER_DESTINATION: "100",
  });
  try {
    const [a, b] = services;
    const { tenantKey } = await createOrg(a.db, "Shared");
    const { form } = await (await admin(a, tenantKey, "POST", "/forms", { name: "F" })).json();
    const created = await admin(a, tenantKey, "POST", `/forms/${form.id}/destinations`, {
      type: "webhook",
      config: { url: sink.url },
    });
    const destinationId = (await created.json()).destination.id;
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      const service = i % 2 === 0 ? a : b;
      const response = await admin(
        service,
        tenantKey,
        "POST",
        `/forms/${form.id}/destinations/${destinationId}/test`,
      );
      statuses.push(response.status);
      if (response.status === 429) {
        assert.ok(Number(response.headers.get("retry-after")) >= 1);
        assert.equal((await response.json()).error, "Too many test sends: try again later");
      } else await response.body?.cancel();
    }
    assert.equal(statuses.filter((s) => s === 200).length, 4, String(statuses));
    assert.equal(sink.hits, 4);

    // Notification tests: their own bucket, shared the same way.
    const ops = await admin(a, tenantKey, "PUT", "/notifications", { webhook: { url: sink.url } });
    assert.equal(ops.status, 200);
    const tests: number[] = [];
    for (let i = 0; i < 6; i++) {
      const response = await admin(i % 2 === 0 ? b : a, tenantKey, "POST", "/notifications/test");
      tests.push(response.status);
      await response.body?.cancel();
    }
    assert.deepEqual(tests, [200, 200, 200, 200, 429, 429]);
  } finally {
    for (const service of services) await service.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a test send bucket refills over its minute and takes from every bucket or none", async () => {
  const dir = await Deno.makeTempDir();
  const [a, b] = await twoInstances(dir, {});
  try {
    const t = Date.UTC(2026, 10, 27, 12);
    const both = [{ scope: "sends", capacity: 2 }, { scope: "destination:d", capacity: 1 }];
    assert.deepEqual(await takeTestSend(a.db, "org", both, t), { ok: true });
    // The destination's bucket is empty: the org's is not taken from.
    assert.deepEqual(await takeTestSend(b.db, "org", both, t), { ok: false, retryAfterMs: 60_000 });
    const sends = [{ scope: "sends", capacity: 2 }];
    assert.deepEqual(await takeTestSend(b.db, "org", sends, t), { ok: true });
    assert.deepEqual(await takeTestSend(a.db, "org", sends, t), {
      ok: false,
      retryAfterMs: 30_000,
    });
    assert.deepEqual(await takeTestSend(a.db, "org", sends, t + 30_000), { ok: true });
    assert.deepEqual(await takeTestSend(a.db, "other", sends, t), { ok: true }, "per organization");
    assert.deepEqual(await takeTestSend(a.db, "org", [{ scope: "x", capacity: 0 }], t), {
      ok: true,
    });
  } finally {
    await a.close();
    await b.close();
    await Deno.remove(dir, { recursive: true });
  }
});
