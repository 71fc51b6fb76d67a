/**
 * `deno task reseal` as an operator runs it against a KV file: the key ids, a count
 * without writing, a reseal that says the earlier key is no longer needed, and a key the
 * environment lacks named, not thrown.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../config.ts";
import { startService } from "../service.ts";
import { createOrg } from "../store/orgs.ts";
import { keyIdOf } from "../store/sealing.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const OLD = crypto.getRandomValues(new Uint8Array(32));
const NEW = crypto.getRandomValues(new Uint8Array(32));

function envOf(kvPath: string, current: Uint8Array, previous: Uint8Array[]) {
  return {
    KV_PATH: kvPath,
    SUBMISSION_ENCRYPTION_KEY: current.toBase64(),
    SUBMISSION_ENCRYPTION_KEYS_PREVIOUS: previous.map((key) => key.toBase64()).join(","),
    LOG_LEVEL: "silent",
    ALLOW_PRIVATE_DESTINATIONS: "true",
  };
}

async function reseal(env: Record<string, string>, ...args: string[]) {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "reseal", ...args],
    cwd: ROOT,
    env: { ...env, NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

Deno.test("deno task reseal counts, rewrites and says when the earlier key is no longer needed", async () => {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/formrelay.kv`;
  try {
    const service = await startService(loadConfig(envOf(kvPath, OLD, [])), { deliver: false });
    try {
      const { tenantKey } = await createOrg(service.db, "Acme");
      const admin = (path: string, body: unknown) =>
        service.app.request(`/v1/admin${path}`, {
          method: "POST",
          headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      const form = (await (await admin("/forms", { name: "Contact" })).json()).form;
      const added = await admin(`/forms/${form.id}/destinations`, {
        type: "webhook",
        config: { url: "http://127.0.0.1:9/hook" },
      });
      assert.equal(added.status, 200);
    } finally {
      await service.close();
    }
    const ring = envOf(kvPath, NEW, [OLD]);

    const ids = await reseal(ring, "--key-ids");
    assert.equal(ids.stdout, `current ${keyIdOf(NEW)}\nearlier ${keyIdOf(OLD)}\n`);

    const counted = await reseal(ring, "--check");
    assert.equal(counted.code, 0, counted.stderr);
    assert.match(counted.stdout, new RegExp(`Key ${keyIdOf(OLD)} still seals 1 value`));
    assert.doesNotMatch(counted.stdout, /Resealed/);

    const done = await reseal(ring);
    assert.equal(done.code, 0, done.stderr);
    assert.match(done.stdout, /Resealed under [0-9a-f]{8}: 1 destinations, 0 forms/);
    assert.match(done.stdout, new RegExp(`Key ${keyIdOf(OLD)} no longer needed`));
    assert.ok(!done.stdout.includes(OLD.toBase64()) && !done.stdout.includes(NEW.toBase64()));

    // The new key alone, as after retiring the old one: nothing is missing.
    const after = await reseal(envOf(kvPath, NEW, []), "--check", "--json");
    assert.deepEqual(JSON.parse(after.stdout).unknown, {});

    // Back to the old key alone (a process never given the new one): named, not thrown.
    const lacking = await reseal(envOf(kvPath, OLD, []), "--check");
    assert.equal(lacking.code, 0, lacking.stderr);
    assert.match(lacking.stdout, new RegExp(`1 value\\(s\\) under key ${keyIdOf(NEW)}`));

    const wrong = await reseal(ring, "--bogus");
    assert.equal(wrong.code, 2);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
