/**
 * A submission sealed under a key a delivering process does not have: its job is held
 * with the reason (the key's id, never a secret), logged, counted and its owner told,
 * nothing sent and nothing dropped; once a process with the key resumes it, it is
 * delivered once.
 */
import assert from "node:assert/strict";
import { createLogger } from "../log.ts";
import { registry } from "../metrics.ts";
import { startService } from "../service.ts";
import { jobsPrefix } from "../store/keys.ts";
import { keyIdOf } from "../store/sealing.ts";
import { startHarness } from "./helpers/harness.ts";
import { testConfig } from "./helpers/config.ts";
import { startWebhookSink } from "./helpers/sink.ts";
import { waitFor } from "./helpers/wait.ts";

const OLD = crypto.getRandomValues(new Uint8Array(32));
const NEW = crypto.getRandomValues(new Uint8Array(32));

async function unknownKeyCount(): Promise<number> {
  const text = await registry.metrics();
  const line = text.split("\n").find((l) =>
    l.startsWith('formrelay_sealed_unknown_key_total{value="envelope"}')
  );
  return line ? Number(line.split(" ").at(-1)) : 0;
}

Deno.test("a submission under a key the delivering process lacks is held, told and delivered once the key is there", async () => {
  const dir = await Deno.makeTempDir();
  await using sink = startWebhookSink();
  await using owner = startWebhookSink(); // the organization's operational webhook
  const kvPath = `${dir}/formrelay.kv`;
  const keys = (current: Uint8Array, previous: Uint8Array[]) => ({
    kvPath,
    submissionEncryptionKey: current.toBase64(),
    submissionEncryptionKeysPrevious: previous.map((key) => key.toBase64()),
  });
  try {
    // A process still on the old ring delivers; the form and destination are sealed under OLD.
    await using old = await startHarness(keys(OLD, []), { queues: false });
    const settings = await old.admin("PUT", "/notifications", {
      webhook: { url: `${owner.url}/owner`, secret: null },
    });
    assert.equal(settings.status, 200);
    const form = await old.createForm();
    const destinationId = await old.addDestination(form.id, {
      type: "webhook",
      config: { url: sink.url },
    });
    const countBefore = await unknownKeyCount();
    // A process restarted with NEW current (the first step skipped) accepts a submission.
    const restarted = await startService(testConfig(keys(NEW, [OLD])), {
      deliver: false,
      queues: false,
      logger: createLogger("silent"),
    });
    try {
      const response = await restarted.app.request(`/v1/f/${form.publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ message: "sealed under the new key" }),
      });
      assert.equal(response.status, 202);
    } finally {
      await restarted.close();
    }

    let kv = old.service.db.kv;
    const heldJob = async () => {
      for await (const entry of kv.list<unknown[]>({ prefix: jobsPrefix() })) {
        if (entry.value[3] === "held") return entry.value;
      }
      return null;
    };
    await waitFor(async () => (await heldJob()) !== null, { message: "the job held" });
    const job = (await heldJob())!;
    const lastError = String(job[8]);
    assert.match(lastError, new RegExp(`key ${keyIdOf(NEW)}, which this service does not have`));
    assert.ok(!lastError.includes(NEW.toBase64()), "never the key");
    const logLine = old.logs.find((line) =>
      line.includes("sealed data under a key not configured")
    );
    assert.ok(logLine, "logged");
    assert.match(logLine, new RegExp(keyIdOf(NEW)));
    assert.ok(!logLine.includes(NEW.toBase64()), "never the key");
    // The attempt's line is written once its outcome's commit returns: the job can be seen
    // held in KV a moment before.
    const findHeldLine = () =>
      old.logs.map((line) => JSON.parse(line)).find((line) =>
        line.msg === "delivery attempt" && line.result === "held"
      );
    await waitFor(() => findHeldLine() !== undefined, { message: "the held attempt logged" });
    const heldLine = findHeldLine();
    assert.match(String(heldLine?.reason), new RegExp(`key ${keyIdOf(NEW)}`), "why it is held");
    assert.ok((await unknownKeyCount()) > countBefore, "counted");
    await waitFor(
      () => owner.received.some((r) => r.body.includes(keyIdOf(NEW))),
      { message: "the owner told" },
    );
    const told = owner.received.find((r) => r.body.includes(keyIdOf(NEW)))!;
    assert.equal(told.json?.type, "message.attempt.failing");
    assert.ok(!told.body.includes("sealed under the new key"), "no payload in the notice");
    assert.equal(sink.hits, 0, "nothing sent");
    await old.close();

    // A process with the new ring resumes the destination: the held submission goes, once.
    const renewed = await startService(testConfig(keys(NEW, [OLD])), {
      queues: false,
      logger: createLogger("silent"),
    });
    kv = renewed.db.kv;
    try {
      const resumed = await renewed.app.request(
        `/v1/admin/forms/${form.id}/destinations/${destinationId}/resume`,
        { method: "POST", headers: { "x-tenant-key": old.tenantKey } },
      );
      assert.equal(resumed.status, 200);
      await waitFor(() => sink.received.length === 1, { message: "delivered" });
      assert.match(sink.received[0].body, /sealed under the new key/);
      await waitFor(async () => (await heldJob()) === null, { message: "the job ended" });
    } finally {
      await renewed.close();
    }
    assert.equal(sink.received.length, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
