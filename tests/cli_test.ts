/**
 * The operator CLIs run as `deno task` subprocesses against a KV file: create-org makes
 * an organization, forms lists what its tenant then set up, without the secrets.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../config.ts";
import { startService } from "../service.ts";
import type { DestinationRecord } from "../store/destinations.ts";
import { destinationKey } from "../store/keys.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** Runs `deno task <args>` in the project with KV_PATH set; stdout, stderr and the exit code. */
async function task(kvPath: string, ...args: string[]) {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", ...args],
    cwd: ROOT,
    env: { KV_PATH: kvPath, LOG_LEVEL: "info", NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

/** Creates a form named "Contact" through the admin API of a service on the KV file; its public key. */
async function createForm(config: ReturnType<typeof loadConfig>, tenantKey: string) {
  const service = await startService(config, { deliver: false });
  try {
    const created = await service.app.request("/v1/admin/forms", {
      method: "POST",
      headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
      body: JSON.stringify({ name: "Contact" }),
    });
    return (await created.json()).form.publicKey as string;
  } finally {
    await service.close();
  }
}

// Secret values given to destinations; none may appear in the listing.
const SECRETS = {
  header: "hdr-secret-3f9a1c",
  signing: `whsec_${new Uint8Array(32).fill(7).toBase64()}`,
  query: "qs-token-8d2e4b",
  userinfo: "userinfo-pass-71c0",
  authHeader: "Bearer sheet-secret-5b7d",
  password: "smtp-pass-c41e9f",
};

Deno.test("create-org prints one JSON line and forms lists the org's forms without secrets", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-cli-" });
  const kvPath = `${dir}/formrelay.kv`;
  try {
    const created = await task(kvPath, "create-org", "Acme", "Ltd");
    assert.equal(created.code, 0, created.stderr);
    const lines = created.stdout.trim().split("\n");
    assert.equal(lines.length, 1, created.stdout);
    const { orgId, tenantKey, ...rest } = JSON.parse(lines[0]);
    assert.deepEqual(rest, {});
    assert.match(orgId, /^[0-9a-f-]{36}$/);
    assert.match(tenantKey, /^sk_[A-Za-z0-9_-]{43,}$/);

    // The tenant sets up forms through the admin API of a service on the same KV file
    // (and the same environment as the subprocesses, for the sealing key).
    const config = loadConfig({ ...Deno.env.toObject(), KV_PATH: kvPath, LOG_LEVEL: "silent" });
    const service = await startService(config, { deliver: false });
    let contact: Record<string, string>;
    let quiet: Record<string, string>;
    const ids: Record<string, string> = {};
    try {
      const admin = async (path: string, body: unknown) => {
        const response = await service.app.request(`/v1/admin${path}`, {
          method: "POST",
          headers: { "x-tenant-key": tenantKey, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
        const answer = await response.json();
        assert.equal(response.status, 200, JSON.stringify(answer));
        return answer;
      };
      contact = (await admin("/forms", {
        name: "Contact\u001b[31m page",
        allowedOrigins: ["https://example.com", "https://www.example.com/"],
        honeypotField: "_gotcha",
        redirectUrl: "https://example.com/thanks",
      })).form;
      quiet = (await admin("/forms", { name: "Newsletter", enabled: false })).form;
      const add = async (name: string, body: unknown) => {
        ids[name] = (await admin(`/forms/${contact.id}/destinations`, body)).destination.id;
      };
      await add("webhook", {
        type: "webhook",
        config: {
          url:
            `https://user:${SECRETS.userinfo}@hooks.example.com/formrelay?token=${SECRETS.query}`,
          method: "PUT",
          headers: { "X-Api-Key": SECRETS.header },
          secret: SECRETS.signing,
        },
      });
      await add("sheets", {
        type: "sheets_webhook",
        config: {
          url: `https://script.google.com/macros/s/abc/exec?key=${SECRETS.query}`,
          authHeader: SECRETS.authHeader,
        },
      });
      await add("smtp", {
        type: "smtp",
        config: {
          host: "smtp.example.com",
          port: 587,
          username: "mailer",
          password: SECRETS.password,
          from: "forms@example.com",
          to: ["ada@example.com", "grace@example.com"],
        },
        isEnabled: false,
      });
      // Paused by the service after repeated failures (the tenant's switch on again).
      const key = destinationKey(contact.id, ids.smtp);
      const record = (await service.db.kv.get<DestinationRecord>(key)).value;
      assert.ok(record);
      await service.db.kv.set(
        key,
        {
          ...record,
          isEnabled: true,
          health: {
            state: "paused",
            reason: "Disabled after 10 failures",
            since: "2026-11-20T10:00:00.000Z",
          },
        } satisfies DestinationRecord,
      );
    } finally {
      await service.close();
    }

    const assertNoSecrets = (output: string) => {
      for (const [name, secret] of Object.entries(SECRETS)) {
        assert.ok(!output.includes(secret), `${name} secret printed:\n${output}`);
      }
      assert.ok(!output.includes("\u001b"), "a raw escape character from a form name");
    };

    await t.step("as text", async () => {
      const { code, stdout, stderr } = await task(kvPath, "forms", orgId);
      assert.equal(code, 0, stderr);
      assertNoSecrets(stdout);
      const expected = [
        `Organization "Acme Ltd" (${orgId}): 2 forms`,
        `Form "Contact\\u001b[31m page" (${contact.id})`,
        `  public key       ${contact.publicKey}`,
        "  enabled          yes",
        "  allowed origins  https://example.com, https://www.example.com",
        "  honeypot field   _gotcha",
        "  redirect URL     https://example.com/thanks",
        "  destinations     3",
        `    - webhook ${ids.webhook} enabled`,
        "      PUT https://hooks.example.com",
        `    - sheets_webhook ${ids.sheets} enabled`,
        "      POST https://script.google.com",
        `    - smtp ${ids.smtp} paused since 2026-11-20T10:00:00.000Z: Disabled after 10 failures`,
        "      smtp.example.com:587 (starttls) -> ada@example.com, grace@example.com",
        `Form "Newsletter" (${quiet.id})`,
        "  enabled          no",
        "  allowed origins  any (none listed)",
        "  destinations     0",
      ];
      const lines = stdout.split("\n");
      let from = 0;
      for (const line of expected) {
        const at = lines.indexOf(line, from);
        assert.ok(at >= 0, `line ${JSON.stringify(line)} (in order) missing from:\n${stdout}`);
        from = at + 1;
      }
    });

    await t.step("as JSON", async () => {
      const { code, stdout, stderr } = await task(kvPath, "forms", orgId, "--json");
      assert.equal(code, 0, stderr);
      assertNoSecrets(stdout);
      const listing = JSON.parse(stdout);
      assert.deepEqual(listing.org, { id: orgId, name: "Acme Ltd" });
      assert.deepEqual(listing.forms.map((f: { id: string }) => f.id), [contact.id, quiet.id]);
      const [form, newsletter] = listing.forms;
      assert.equal(form.name, "Contact\u001b[31m page");
      assert.equal(form.publicKey, contact.publicKey);
      assert.equal(form.enabled, true);
      assert.deepEqual(form.allowedOrigins, ["https://example.com", "https://www.example.com"]);
      assert.deepEqual(form.destinations, [
        {
          id: ids.webhook,
          type: "webhook",
          isEnabled: true,
          health: { state: "healthy", reason: null, since: null },
          target: { method: "PUT", url: "https://hooks.example.com" },
        },
        {
          id: ids.sheets,
          type: "sheets_webhook",
          isEnabled: true,
          health: { state: "healthy", reason: null, since: null },
          target: { method: "POST", url: "https://script.google.com" },
        },
        {
          id: ids.smtp,
          type: "smtp",
          isEnabled: true,
          health: {
            state: "paused",
            reason: "Disabled after 10 failures",
            since: "2026-11-20T10:00:00.000Z",
          },
          target: {
            relay: "smtp.example.com:587",
            secureTransport: "starttls",
            to: ["ada@example.com", "grace@example.com"],
          },
        },
      ]);
      assert.equal(newsletter.enabled, false);
      assert.deepEqual(newsletter.destinations, []);
    });

    await t.step("an unknown org or a missing argument is an error", async () => {
      const unknown = await task(kvPath, "forms", crypto.randomUUID());
      assert.equal(unknown.code, 1);
      assert.equal(unknown.stdout, "");
      assert.match(unknown.stderr, /no organization "/);
      const missing = await task(kvPath, "forms");
      assert.equal(missing.code, 2);
      assert.match(missing.stderr, /Usage: deno task forms <orgId> \[--json\]/);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("orgs lists the organizations; issue-key gives a lost organization a new key and revokes the old", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-cli-" });
  const kvPath = `${dir}/formrelay.kv`;
  try {
    const empty = await task(kvPath, "orgs");
    assert.equal(empty.code, 0, empty.stderr);
    assert.match(empty.stdout, /^No organizations yet: deno task create-org/);
    const acme = JSON.parse((await task(kvPath, "create-org", "Acme")).stdout);
    const other = JSON.parse((await task(kvPath, "create-org", "Other\u001b[31m")).stdout);

    const listed = await task(kvPath, "orgs", "--json");
    assert.equal(listed.code, 0, listed.stderr);
    const orgs = JSON.parse(listed.stdout);
    assert.deepEqual(
      orgs.map((o: Record<string, unknown>) => [o.orgId, o.name, o.activeKeys]),
      [[acme.orgId, "Acme", 1], [other.orgId, "Other\u001b[31m", 1]],
    );
    assert.ok(!listed.stdout.includes("sk_"), "no key is listed");
    const text = await task(kvPath, "orgs");
    assert.match(
      text.stdout,
      new RegExp(`^${acme.orgId}  Acme  \\(created .*, 1 active key\\)$`, "m"),
    );
    assert.ok(!text.stdout.includes("\u001b"), "control characters are escaped");

    // A form made with the old key keeps its public key after the new key is issued.
    const config = loadConfig({ ...Deno.env.toObject(), KV_PATH: kvPath, LOG_LEVEL: "silent" });
    const status = async (tenantKey: string) => {
      const service = await startService(config, { deliver: false });
      try {
        const response = await service.app.request("/v1/admin/forms", {
          headers: { "x-tenant-key": tenantKey },
        });
        const body = await response.json();
        return { status: response.status, forms: body.forms as { publicKey: string }[] };
      } finally {
        await service.close();
      }
    };
    const publicKey = await createForm(config, acme.tenantKey);

    const issued = await task(kvPath, "issue-key", acme.orgId);
    assert.equal(issued.code, 0, issued.stderr);
    const lines = issued.stdout.trim().split("\n");
    assert.equal(lines.length, 1);
    const { orgId, tenantKey, ...rest } = JSON.parse(lines[0]);
    assert.deepEqual(rest, {});
    assert.equal(orgId, acme.orgId);
    assert.match(tenantKey, /^sk_[A-Za-z0-9_-]{43,}$/);
    assert.equal((await status(acme.tenantKey)).status, 401, "the old key is revoked");
    const now = await status(tenantKey);
    assert.equal(now.status, 200);
    assert.deepEqual(now.forms.map((f) => f.publicKey), [publicKey]);
    assert.equal((await status(other.tenantKey)).status, 200, "other organizations keep theirs");

    const unknown = await task(kvPath, "issue-key", crypto.randomUUID());
    assert.equal(unknown.code, 1);
    assert.equal(unknown.stdout, "");
    assert.match(unknown.stderr, /no organization "/);
    const missing = await task(kvPath, "issue-key");
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /Usage: deno task issue-key <orgId>/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("disable-org refuses an organization's keys and forms until enable-org; delete-org --yes removes it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-cli-" });
  const kvPath = `${dir}/formrelay.kv`;
  try {
    const acme = JSON.parse((await task(kvPath, "create-org", "Acme")).stdout);
    const other = JSON.parse((await task(kvPath, "create-org", "Other")).stdout);
    const config = loadConfig({ ...Deno.env.toObject(), KV_PATH: kvPath, LOG_LEVEL: "silent" });
    /** The answers of a fresh service: the admin API with each key, and a submission. */
    const answers = async (publicKey: string) => {
      const service = await startService(config, { deliver: false });
      try {
        const admin = async (tenantKey: string) =>
          (await service.app.request("/v1/admin/forms", {
            headers: { "x-tenant-key": tenantKey },
          })).status;
        const submitted = await service.app.request(`/v1/f/${publicKey}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ message: "hello" }),
        });
        return {
          acme: await admin(acme.tenantKey),
          other: await admin(other.tenantKey),
          submit: submitted.status,
        };
      } finally {
        await service.close();
      }
    };
    const publicKey = await createForm(config, acme.tenantKey);
    assert.deepEqual(await answers(publicKey), { acme: 200, other: 200, submit: 202 });

    const disabled = await task(kvPath, "disable-org", acme.orgId);
    assert.equal(disabled.code, 0, disabled.stderr);
    assert.equal(disabled.stdout.trim(), `${acme.orgId} disabled "Acme"`);
    assert.deepEqual(await answers(publicKey), { acme: 401, other: 200, submit: 404 });
    const listed = JSON.parse((await task(kvPath, "orgs", "--json")).stdout);
    assert.ok(listed.find((o: { orgId: string }) => o.orgId === acme.orgId).disabledAt);

    const enabled = await task(kvPath, "enable-org", acme.orgId);
    assert.equal(enabled.code, 0, enabled.stderr);
    assert.deepEqual(await answers(publicKey), { acme: 200, other: 200, submit: 202 });

    const unconfirmed = await task(kvPath, "delete-org", acme.orgId);
    assert.equal(unconfirmed.code, 2);
    assert.match(unconfirmed.stderr, /--yes/);
    const deleted = await task(kvPath, "delete-org", acme.orgId, "--yes");
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.deepEqual(await answers(publicKey), { acme: 401, other: 200, submit: 404 });
    const left = JSON.parse((await task(kvPath, "orgs", "--json")).stdout);
    assert.deepEqual(left.map((o: { orgId: string }) => o.orgId), [other.orgId]);
    const unknown = await task(kvPath, "disable-org", acme.orgId);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no organization "/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deno task dev stops on SIGTERM: the watcher ends with the service", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "dev"],
    cwd: ROOT,
    env: { KV_PATH: ":memory:", PORT: "0", LOG_LEVEL: "info", NO_COLOR: "1" },
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let output = "";
  while (!output.includes('"msg":"listening"')) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`dev ended before listening: ${output}`);
    output += value;
  }
  child.kill("SIGTERM");
  let timer: ReturnType<typeof setTimeout> | undefined;
  const ended = await Promise.race([
    child.status.then(() => true),
    new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), 20_000)),
  ]);
  clearTimeout(timer);
  if (!ended) child.kill("SIGKILL");
  await reader.cancel();
  assert.ok(ended, "deno task dev was still running 20 s after SIGTERM");
});

Deno.test("deno task start in a fresh copy installs only the packages the service uses (deno.lock), and /v1/docs works", async () => {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-fresh-" });
  try {
    // The project's files as a clone has them, without node_modules (Deno's global cache
    // still holds the packages, so nothing is downloaded).
    const archive = new Deno.Command("bash", {
      args: [
        "-c",
        `git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "${dir}"`,
      ],
      cwd: ROOT,
    });
    assert.equal((await archive.output()).code, 0);
    const child = new Deno.Command(Deno.execPath(), {
      args: ["task", "--quiet", "start"],
      cwd: dir,
      env: { KV_PATH: ":memory:", PORT: "0", NO_COLOR: "1" },
      stdout: "piped",
      stderr: "null",
    }).spawn();
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let output = "";
    try {
      while (!output.includes('"msg":"listening"')) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`start ended before listening: ${output}`);
        output += value;
      }
      const url = JSON.parse(output.split("\n").find((l) => l.includes('"listening"'))!).url;
      const bundle = await fetch(`${url}/v1/docs/swagger-ui-bundle.js`);
      assert.equal(bundle.status, 200);
      await bundle.body?.cancel();
    } finally {
      child.kill("SIGTERM");
      await child.status;
      await reader.cancel();
    }
    const installed: string[] = [];
    for await (const entry of Deno.readDir(`${dir}/node_modules`)) {
      if (!entry.name.startsWith(".")) installed.push(entry.name);
    }
    // `deno task` installs every package of deno.lock: test-only packages belong in
    // deno.test.lock (`deno task test` and `check` use it; a bare `deno test` adds them to
    // deno.lock: `git checkout deno.lock` then).
    assert.deepEqual(installed.sort(), [
      "@opentelemetry",
      "denque",
      "disposable-email-domains",
      "hono",
      "prom-client",
      "re2js",
      "swagger-ui-dist",
      "zod",
    ], "deno.lock holds packages the service does not use");
    // deno.lock already held everything the service needed.
    assert.equal(
      await Deno.readTextFile(`${dir}/deno.lock`),
      await Deno.readTextFile(`${ROOT}/deno.lock`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
