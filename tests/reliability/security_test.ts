/**
 * Reliability 4: security properties against the real service in a child process.
 * Tenant isolation, revoked and unknown keys, concurrent rotation, secrets kept out of
 * logs and answers, no plaintext payload in the KV file or logs, the outbound address
 * guard, and no header injection into emails.
 */
import assert from "node:assert/strict";
import { type ServiceProcess, startServiceProcess } from "../helpers/process.ts";
import { startWebhookSink } from "../helpers/sink.ts";
import { startSmtpServer } from "../helpers/smtp_server.ts";
import { waitFor } from "../helpers/wait.ts";
import {
  type AdminAnswer,
  adminClient,
  createFormWith,
  findPlaintext,
  prepareWorkspace,
  submit,
} from "./helpers/cluster.ts";

const random = () => crypto.getRandomValues(new Uint8Array(24)).toHex();

/** Every admin route with its method, for a form and a destination id. */
function adminRoutes(formId: string, destId: string): [string, string, unknown?][] {
  return [
    ["GET", "/forms"],
    ["POST", "/forms", { name: "x" }],
    ["POST", "/keys/rotate"],
    ...formRoutes(formId, destId),
  ];
}

/** The admin routes that name a form (and a destination). */
function formRoutes(formId: string, destId: string): [string, string, unknown?][] {
  return [
    ["GET", `/forms/${formId}`],
    ["PATCH", `/forms/${formId}`, { name: "stolen" }],
    ["DELETE", `/forms/${formId}`],
    ["GET", `/forms/${formId}/destinations`],
    ["POST", `/forms/${formId}/destinations`, {
      type: "webhook",
      config: { url: "http://127.0.0.1:1/x" },
    }],
    ["PATCH", `/forms/${formId}/destinations/${destId}`, { isEnabled: false }],
    ["DELETE", `/forms/${formId}/destinations/${destId}`],
    ["POST", `/forms/${formId}/destinations/${destId}/test`],
    ["GET", `/forms/${formId}/deliveries`],
  ];
}

Deno.test("security properties hold against the running service", async (t) => {
  const smtpUser = "relay-user";
  const smtpPassword = `smtp-pass-${random()}`;
  const smtp = await startSmtpServer({ mode: "off", username: smtpUser, password: smtpPassword });
  const sink = startWebhookSink();
  const workspace = await prepareWorkspace(3, {
    PLATFORM_SMTP_HOST: "127.0.0.1",
    PLATFORM_SMTP_PORT: String(smtp.port),
    PLATFORM_SMTP_SECURE_TRANSPORT: "off",
    PLATFORM_SMTP_USERNAME: smtpUser,
    PLATFORM_SMTP_PASSWORD: smtpPassword,
    PLATFORM_SMTP_FROM_EMAIL: "notify@formrelay.example",
  });
  const [orgA, orgB, orgC] = workspace.orgs;
  const marker = `security-marker-${crypto.randomUUID()}`;
  const headerSecret = `Bearer hdr-${random()}`;
  const sheetsSecret = `Bearer sheets-${random()}`;
  const webhookSecret = `whsec_${crypto.getRandomValues(new Uint8Array(32)).toBase64()}`;
  const secrets = [smtpPassword, headerSecret, sheetsSecret, webhookSecret, orgA.tenantKey];
  /** Answers that did not issue a secret; none may show one. */
  const answers: AdminAnswer[] = [];
  const processes: ServiceProcess[] = [];
  const canary = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let canaryHits = 0;
  const canaryLoop = (async () => {
    try {
      for await (const conn of canary) {
        canaryHits++;
        conn.close();
      }
    } catch { /* closed */ }
  })();
  try {
    const service = await startServiceProcess(workspace.env, { stderr: "piped" });
    processes.push(service);
    const adminA = adminClient(() => service.origin, orgA.tenantKey);
    const adminB = adminClient(() => service.origin, orgB.tenantKey);
    const keep = async (answer: Promise<AdminAnswer>) => {
      const a = await answer;
      answers.push(a);
      return a;
    };
    const smtpRelay = {
      host: "127.0.0.1",
      port: smtp.port,
      secureTransport: "off",
      username: smtpUser,
      password: smtpPassword,
      from: "forms@tenant.example",
      to: ["owner@tenant.example"],
      subjectTemplate: "New {{formName}}\r\nX-Injected-Subject: yes",
    };
    const formA = await createFormWith(
      adminA,
      "Contact\r\nBcc: victim@evil.example\r\nX-Injected-Name: yes",
      [
        { type: "webhook", config: { url: sink.url, headers: { authorization: headerSecret } } },
        { type: "webhook", config: { url: sink.url, secret: webhookSecret } },
        { type: "sheets_webhook", config: { url: sink.url, authHeader: sheetsSecret } },
        { type: "smtp", config: smtpRelay },
        {
          type: "smtp",
          config: {
            to: ["inbox@tenant.example"],
            subjectTemplate: "{{formName}}\nBcc: x@evil.example",
          },
        },
      ],
    );
    const formB = await createFormWith(adminB, "B", []);
    const destA = formA.destinationIds[0];

    await t.step(
      "header injection through the form name, subject template and payload email is impossible",
      async () => {
        const result = await submit(service.origin, formA.publicKey, {
          marker,
          email: "ada@example.org\r\nBcc: victim@evil.example\r\nX-Injected-Email: yes",
        });
        assert.equal(result.status, 202);
        const second = await submit(service.origin, formA.publicKey, {
          marker,
          email: "ada@example.org\nX-Injected-Email: yes",
        });
        assert.equal(second.status, 202);
        await smtp.waitForMessages(4, 20_000);
        await waitFor(() => sink.received.length >= 6, { timeoutMs: 20_000 });
        for (const message of smtp.messages) {
          assert.deepEqual(
            message.to.sort(),
            message.to.includes("inbox@tenant.example")
              ? ["inbox@tenant.example"]
              : ["owner@tenant.example"],
          );
          const head = message.raw.slice(0, message.raw.indexOf("\r\n\r\n"));
          const names = head.split("\r\n").filter((l) => !/^[ \t]/.test(l)).map((l) =>
            l.slice(0, l.indexOf(":")).toLowerCase()
          );
          for (
            const forbidden of ["bcc", "x-injected-name", "x-injected-subject", "x-injected-email"]
          ) {
            assert.ok(!names.includes(forbidden), `${forbidden} header in:\n${head}`);
          }
          assert.ok(!/\r\n(Bcc|X-Injected[\w-]*):/i.test(head), head);
        }
      },
    );

    await t.step("cross-org access to every admin route is 404", async () => {
      for (const [method, path, body] of formRoutes(formA.formId, destA)) {
        const answer = await keep(adminB(method, path, body));
        assert.equal(answer.status, 404, `${method} ${path}: ${answer.text}`);
      }
      // B's own form with A's destination id.
      for (const [method, path, body] of formRoutes(formB.formId, destA).slice(5, 8)) {
        const answer = await keep(adminB(method, path, body));
        assert.equal(answer.status, 404, `${method} ${path}: ${answer.text}`);
      }
      const listed = await keep(adminB("GET", "/forms"));
      assert.ok(!listed.text.includes(formA.formId));
      const still = await keep(adminA("GET", `/forms/${formA.formId}/destinations`));
      assert.equal(still.body.destinations.length, 5);
      assert.ok(still.body.destinations.every((d: { isEnabled: boolean }) => d.isEnabled));
    });

    await t.step("revoked and unknown keys are 401 on every admin route", async () => {
      const adminC = adminClient(() => service.origin, orgC.tenantKey);
      const rotated = await adminC("POST", "/keys/rotate");
      assert.equal(rotated.status, 200);
      const unknown = `sk_${
        crypto.getRandomValues(new Uint8Array(32)).toBase64({
          alphabet: "base64url",
          omitPadding: true,
        })
      }`;
      for (const key of [orgC.tenantKey, unknown]) {
        for (const [method, path, body] of adminRoutes(formA.formId, destA)) {
          const answer = await keep(adminC(method, path, body, key));
          assert.equal(answer.status, 401, `${method} ${path}`);
          assert.equal(answer.body.error, "Invalid tenant key");
        }
      }
      orgC.tenantKey = rotated.body.tenantKey;
    });

    await t.step("50 concurrent rotations leave exactly one working key", async () => {
      const adminC = adminClient(() => service.origin, orgC.tenantKey);
      const results = await Promise.all(
        Array.from({ length: 50 }, () => adminC("POST", "/keys/rotate")),
      );
      const issued = results.filter((r) => r.status === 200).map((r) => r.body.tenantKey as string);
      assert.ok(issued.length >= 1);
      assert.ok(results.every((r) => r.status === 200 || r.status === 401));
      const working = [];
      for (const key of [...issued, orgC.tenantKey]) {
        const answer = await keep(adminC("GET", "/forms", undefined, key));
        if (answer.status === 200) working.push(key);
      }
      assert.equal(working.length, 1, `${issued.length} keys issued, ${working.length} work`);
      assert.ok(issued.includes(working[0]));
    });

    await t.step(
      "secrets never appear in logs or in answers other than the one that issued them",
      async () => {
        await keep(adminA("GET", `/forms/${formA.formId}/destinations`));
        await keep(adminA("GET", `/forms/${formA.formId}/deliveries`));
        await keep(adminA("GET", `/forms/${formA.formId}`));
        for (const id of formA.destinationIds) {
          await keep(
            adminA("PATCH", `/forms/${formA.formId}/destinations/${id}`, { isEnabled: true }),
          );
          await keep(adminA("POST", `/forms/${formA.formId}/destinations/${id}/test`));
        }
        await keep(adminA("POST", `/forms/${formA.formId}/destinations`, {
          type: "webhook",
          config: { url: "ftp://x", headers: { authorization: headerSecret } },
        }));
        await service.kill("SIGTERM");
        const logs = [...service.lines, ...service.stderrLines];
        for (const secret of secrets) {
          assert.ok(!logs.some((line) => line.includes(secret)), "a secret in the logs");
          const leaking = answers.filter((a) => a.text.includes(secret));
          assert.deepEqual(leaking.map((a) => a.text.slice(0, 200)), [], "a secret in an answer");
        }
        assert.ok(
          !logs.some((line) => /\bsk_[A-Za-z0-9_-]{20,}/.test(line)),
          "a tenant key in the logs",
        );
      },
    );

    await t.step(
      "the payload marker is nowhere in plaintext: not in the KV file, not in the logs",
      async () => {
        const logs = [...service.lines, ...service.stderrLines];
        assert.ok(smtp.messages.some((m) => m.raw.includes(marker)), "the marker was delivered");
        assert.deepEqual(await findPlaintext(marker, { dir: workspace.dir, logs }), []);
      },
    );

    await t.step(
      "webhook URLs to loopback, private and metadata addresses are refused when not allowed",
      async () => {
        const guarded = await prepareWorkspace(1, { ALLOW_PRIVATE_DESTINATIONS: "false" });
        try {
          // Refused at save: each address, with the setting that would allow it.
          const strict = await startServiceProcess(guarded.env, { stderr: "piped" });
          processes.push(strict);
          let serving = strict;
          const admin = adminClient(() => serving.origin, guarded.orgs[0].tenantKey);
          const port = (canary.addr as Deno.NetAddr).port;
          const urls = [
            `http://127.0.0.1:${port}/hook`,
            `http://localhost:${port}/hook`,
            `http://[::1]:${port}/hook`,
            `http://2130706433:${port}/hook`,
            `http://0.0.0.0:${port}/hook`,
            "http://10.0.0.1/hook",
            "http://172.16.0.1/hook",
            "http://192.168.1.1/hook",
            "http://100.64.0.1/hook",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:169.254.169.254]/latest/meta-data/",
            "http://[fd00::1]/hook",
          ];
          const saving = await admin("POST", "/forms", { name: "Refused at save" });
          for (const url of urls) {
            const refused = await admin("POST", `/forms/${saving.body.form.id}/destinations`, {
              type: "webhook",
              config: { url },
            });
            assert.equal(refused.status, 400, url);
            assert.match(refused.text, /is not allowed: .*ALLOW_PRIVATE_DESTINATIONS=true/, url);
          }
          await strict.kill("SIGTERM");

          // Saved where allowed (an older configuration, say), they are refused when delivered.
          const allowing = await startServiceProcess(
            { ...guarded.env, ALLOW_PRIVATE_DESTINATIONS: "true" },
            { stderr: "piped" },
          );
          processes.push(allowing);
          serving = allowing;
          const form = await createFormWith(admin, "Guarded", [
            ...urls.map((url) => ({ type: "webhook", config: { url } })),
            { type: "sheets_webhook", config: { url: "http://169.254.169.254/exec" } },
            { type: "smtp", config: { ...smtpRelay, port } },
          ]);
          await allowing.kill("SIGTERM");
          const guardedAgain = await startServiceProcess(guarded.env, { stderr: "piped" });
          processes.push(guardedAgain);
          serving = guardedAgain;
          assert.equal((await submit(guardedAgain.origin, form.publicKey, { marker })).status, 202);
          let outcomes: { status: string; lastError: string; destinationId: string }[] = [];
          await waitFor(async () => {
            const answer = await admin("GET", `/forms/${form.formId}/deliveries`);
            outcomes = answer.body.deliveries;
            return outcomes.length === form.destinationIds.length &&
              outcomes.every((o) => o.status !== "retrying");
          }, { timeoutMs: 20_000, message: () => JSON.stringify(outcomes) });
          for (const outcome of outcomes) {
            assert.equal(outcome.status, "failed");
            assert.match(outcome.lastError, /Destination address is not allowed/);
          }
          assert.equal(canaryHits, 0, "a refused destination was contacted");
          await guardedAgain.kill("SIGTERM");
          const logs = [
            ...strict.lines,
            ...strict.stderrLines,
            ...guardedAgain.lines,
            ...guardedAgain.stderrLines,
          ];
          assert.deepEqual(await findPlaintext(marker, { dir: guarded.dir, logs }), []);
        } finally {
          await guarded.remove();
        }
      },
    );
  } finally {
    for (const process of processes) await process.kill("SIGKILL");
    canary.close();
    await canaryLoop;
    await sink.close();
    await smtp.close();
    await workspace.remove();
  }
});
