import assert from "node:assert/strict";
import { keepStoredSecrets, type SecretKind, secretsSet } from "./descriptor.ts";

const SECRETS: Record<string, SecretKind> = {
  url: "url",
  headers: "headerValues",
  secret: "value",
};
const STORED = {
  url: "https://hooks.example.com/in?token=abc",
  method: "POST",
  headers: { "X-Key": "k1" },
  secret: "whsec_stored",
};

Deno.test("keepStoredSecrets keeps secrets left out or sent as shown, and removes them for null", () => {
  const shown = {
    url: "https://hooks.example.com/in?token=********",
    method: "PUT",
    headers: { "X-Key": "********", "X-New": "n" },
    secret: "********",
  };
  assert.deepEqual(keepStoredSecrets(shown, STORED, SECRETS), {
    config: { ...STORED, method: "PUT", headers: { "X-Key": "k1", "X-New": "n" } },
    issues: [],
  });
  assert.deepEqual(keepStoredSecrets({ method: "PUT" }, STORED, SECRETS).config, {
    ...STORED,
    method: "PUT",
  });
  assert.deepEqual(
    keepStoredSecrets({ url: STORED.url, secret: null, headers: null }, STORED, SECRETS).config,
    { url: STORED.url },
  );
  // New values replace the stored ones.
  const fresh = { url: "https://new.example.com/", secret: "whsec_new", headers: {} };
  assert.deepEqual(keepStoredSecrets(fresh, STORED, SECRETS).config, fresh);
});

Deno.test("keepStoredSecrets reports what it cannot keep instead of storing a placeholder", () => {
  const { issues } = keepStoredSecrets(
    {
      url: "https://other.example.com/in?token=********",
      headers: { "X-Unknown": "********" },
    },
    STORED,
    SECRETS,
  );
  assert.deepEqual(issues.map((issue) => issue.path), ["config.url", "config.headers.X-Unknown"]);
  // A placeholder for a secret never stored is left out, so validation judges its absence.
  const { config } = keepStoredSecrets(
    { url: STORED.url, secret: "********" },
    { url: STORED.url },
    SECRETS,
  );
  assert.deepEqual(config, { url: STORED.url });
  // Not an object: left to the type's validation.
  assert.equal(keepStoredSecrets("nope", STORED, SECRETS).config, "nope");
});

Deno.test("secretsSet lists the secret fields that hold a value", () => {
  assert.deepEqual(secretsSet(STORED, SECRETS), ["url", "headers", "secret"]);
  assert.deepEqual(secretsSet({ url: "https://a.example/", headers: {} }, SECRETS), ["url"]);
});
