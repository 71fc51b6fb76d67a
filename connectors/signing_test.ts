import assert from "node:assert/strict";
import { StandardWebhook, SvixWebhook } from "../tests/deps.ts";
import { deliveryRequest, httpDeps, startSink } from "../tests/helpers/connector_sink.ts";
import {
  keepPreviousSecrets,
  MAX_PREVIOUS_SECRETS,
  newSigningSecret,
  previousSecretValidUntil,
  rotateSigningSecret,
  signingSecretsAt,
} from "./signing.ts";
import {
  createWebhookConnector,
  storedWebhookConfigSchema,
  type WebhookConfig,
} from "./webhook.ts";

const HOUR = 3_600_000;
const connector = createWebhookConnector(httpDeps(5_000));

/** Delivers once with `config` to a real sink; returns what the receiver got. */
async function deliverOnce(config: Omit<WebhookConfig, "url" | "method" | "headers">) {
  await using sink = startSink(() => new Response("ok"));
  const stored = storedWebhookConfigSchema.parse({ url: `${sink.origin}/in`, ...config });
  await connector.deliver(deliveryRequest(stored, { deliveryId: "msg_rotation" }));
  const [request] = sink.requests;
  return { body: request.body, headers: Object.fromEntries(request.headers) };
}

/** Whether both the Standard Webhooks and the Svix verifier accept the delivery with `secret`. */
function verifies(secret: string, received: { body: string; headers: Record<string, string> }) {
  const results = [new StandardWebhook(secret), new SvixWebhook(secret)].map((verifier) => {
    try {
      verifier.verify(received.body, received.headers);
      return true;
    } catch {
      return false;
    }
  });
  assert.equal(results[0], results[1], "the two verifiers agree");
  return results[0];
}

Deno.test("during the grace a delivery verifies with the old secret alone and with the new alone", async () => {
  const old = newSigningSecret();
  const { config, secret, previousValidUntil } = rotateSigningSecret({ secret: old }, {
    now: Date.now(),
    graceMs: 24 * HOUR,
  });
  assert.notEqual(secret, old);
  assert.equal(config.secret, secret);
  assert.ok(previousValidUntil !== null && Date.parse(previousValidUntil) > Date.now() + 23 * HOUR);
  const received = await deliverOnce(config);
  assert.equal(received.headers["webhook-signature"].split(" ").length, 2);
  assert.match(received.headers["webhook-signature"], /^v1,\S+ v1,\S+$/);
  assert.ok(verifies(secret, received), "the new secret verifies");
  assert.ok(verifies(old, received), "the old secret verifies");
  assert.ok(!verifies(newSigningSecret(), received), "another secret does not");
});

Deno.test("after the grace only the new secret verifies", async () => {
  const old = newSigningSecret();
  // Rotated 25 hours ago with a 24-hour grace: the old secret stopped an hour ago.
  const { config, secret } = rotateSigningSecret({ secret: old }, {
    now: Date.now() - 25 * HOUR,
    graceMs: 24 * HOUR,
  });
  const received = await deliverOnce(config);
  assert.equal(received.headers["webhook-signature"].split(" ").length, 1);
  assert.ok(verifies(secret, received));
  assert.ok(!verifies(old, received));
});

Deno.test("a grace of 0 replaces the secret at once", async () => {
  const old = newSigningSecret();
  const rotated = rotateSigningSecret({ secret: old }, { now: Date.now(), graceMs: 0 });
  assert.equal(rotated.previousValidUntil, null);
  assert.equal(rotated.config.previousSecrets, undefined);
  const received = await deliverOnce(rotated.config);
  assert.ok(verifies(rotated.secret, received));
  assert.ok(!verifies(old, received));
});

Deno.test("an earlier secret signs until its time and stops exactly then", () => {
  const t0 = Date.parse("2026-01-01T00:00:00.000Z");
  const old = newSigningSecret();
  const { config, secret, previousValidUntil } = rotateSigningSecret({ secret: old }, {
    now: t0,
    graceMs: 2 * HOUR,
  });
  assert.equal(previousValidUntil, "2026-01-01T02:00:00.000Z");
  assert.deepEqual(signingSecretsAt(config, t0 + 2 * HOUR - 1), [secret, old]);
  assert.deepEqual(signingSecretsAt(config, t0 + 2 * HOUR), [secret]);
  assert.equal(previousSecretValidUntil(config, t0 + 2 * HOUR - 1), previousValidUntil);
  assert.equal(previousSecretValidUntil(config, t0 + 2 * HOUR), null);
});

Deno.test("rotating again keeps the earlier secrets still in their grace, at most the cap", () => {
  const t0 = Date.parse("2026-01-01T00:00:00.000Z");
  const first = newSigningSecret();
  let config: WebhookConfig = {
    url: "https://x.example/",
    method: "POST",
    headers: {},
    secret: first,
  };
  const shown = [first];
  for (let i = 1; i <= MAX_PREVIOUS_SECRETS + 1; i++) {
    const rotated = rotateSigningSecret(config, { now: t0 + i * HOUR, graceMs: 24 * HOUR });
    config = rotated.config;
    shown.push(rotated.secret);
  }
  // The current one and the MAX_PREVIOUS_SECRETS that stop last; the first one dropped.
  const signing = signingSecretsAt(config, t0 + 7 * HOUR);
  assert.equal(signing.length, 1 + MAX_PREVIOUS_SECRETS);
  assert.equal(signing[0], shown.at(-1));
  assert.ok(!signing.includes(first));
  assert.deepEqual(new Set(signing), new Set(shown.slice(1)));
  assert.ok(storedWebhookConfigSchema.safeParse(config).success);
});

Deno.test("a rotation without a secret sets a first one, with nothing earlier to sign", () => {
  const rotated = rotateSigningSecret({}, { now: 0, graceMs: 24 * HOUR });
  assert.match(rotated.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
  assert.equal(rotated.previousValidUntil, null);
  assert.deepEqual(signingSecretsAt(rotated.config, 0), [rotated.secret]);
});

Deno.test("an edit keeps the earlier secrets only while it keeps the current one", () => {
  const now = Date.parse("2026-01-01T00:00:00.000Z");
  const old = newSigningSecret();
  const { config: stored, secret } = rotateSigningSecret({ secret: old }, { now, graceMs: HOUR });
  const kept = keepPreviousSecrets(stored, { secret, url: "https://y.example/" }, now);
  assert.deepEqual(kept.previousSecrets, stored.previousSecrets);
  const replaced = keepPreviousSecrets(stored, { secret: newSigningSecret() }, now);
  assert.equal(replaced.previousSecrets, undefined);
  const removed = keepPreviousSecrets(stored, {}, now);
  assert.equal(removed.previousSecrets, undefined);
  const expired = keepPreviousSecrets(stored, { secret }, now + HOUR);
  assert.equal(expired.previousSecrets, undefined);
});

Deno.test("a client cannot set earlier secrets: the accepted config refuses the field", () => {
  const parsed = connector.configSchema.safeParse({
    url: "https://x.example/",
    secret: newSigningSecret(),
    previousSecrets: [{ secret: newSigningSecret(), until: "2099-01-01T00:00:00.000Z" }],
  });
  assert.equal(parsed.success, false);
});

Deno.test("answers never show the earlier secrets", () => {
  const { config } = rotateSigningSecret(
    { url: "https://x.example/", method: "POST" as const, headers: {}, secret: newSigningSecret() },
    { now: Date.now(), graceMs: HOUR },
  );
  const shown = connector.redact(config);
  assert.equal("previousSecrets" in shown, false);
  assert.equal(shown.secret, "********");
});
