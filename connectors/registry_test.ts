import assert from "node:assert/strict";
import { z } from "zod";
import { testConfig } from "../tests/helpers/config.ts";
import { redactSecrets } from "./descriptor.ts";
import { createConnectors } from "./mod.ts";
import {
  consoleDestinationTypes,
  describeTarget,
  descriptorOf,
  DESCRIPTORS,
  DESTINATION_TYPES,
} from "./registry.ts";

Deno.test("every type has one descriptor, offered once to the console, grouped", () => {
  assert.deepEqual(DESTINATION_TYPES, DESCRIPTORS.map((descriptor) => descriptor.type));
  assert.equal(new Set(DESTINATION_TYPES).size, DESTINATION_TYPES.length);
  for (const type of DESTINATION_TYPES) assert.equal(descriptorOf(type).type, type);
  const offered = consoleDestinationTypes().map((entry) => entry.type);
  assert.deepEqual(offered, [
    "webhook",
    "sheets_webhook",
    "smtp",
    "slack",
    "discord",
    "teams",
    "telegram",
  ]);
});

Deno.test("each console field and secret names a field of its type's documented config", () => {
  for (const descriptor of DESCRIPTORS) {
    const schema = z.toJSONSchema(descriptor.docSchema, { io: "input" }) as {
      properties?: Record<string, unknown>;
      anyOf?: { properties: Record<string, unknown> }[];
    };
    const names = new Set(
      [schema, ...(schema.anyOf ?? [])].flatMap((part) => Object.keys(part.properties ?? {})),
    );
    const used = [
      ...descriptor.editors.flatMap((editor) => editor.fields.map((field) => field.name)),
      ...Object.keys(descriptor.secrets),
    ];
    for (const name of used) assert.ok(names.has(name), `${descriptor.type}.${name}`);
  }
});

Deno.test("each descriptor names the hosts its config connects to, by field", () => {
  for (const type of ["webhook", "sheets_webhook", "slack", "discord", "teams"] as const) {
    assert.deepEqual(descriptorOf(type).hosts({ url: "https://10.0.0.1:8443/hook?k=1" }), [
      { path: "config.url", host: "10.0.0.1" },
    ], type);
    assert.deepEqual(descriptorOf(type).hosts({ url: "not a url" }), [], type);
  }
  assert.deepEqual(descriptorOf("smtp").hosts({ host: "127.0.0.1", port: 25 }), [
    { path: "config.host", host: "127.0.0.1" },
  ]);
  // The platform relay and Telegram's API are the deployment's, not the tenant's.
  assert.deepEqual(descriptorOf("smtp").hosts({ to: ["a@example.com"] }), []);
  assert.deepEqual(descriptorOf("telegram").hosts({ botToken: "1:x", chatId: 1 }), []);
});

Deno.test("redactSecrets hides each kind of secret and leaves the rest", () => {
  const config = {
    url: "https://u:p@example.com/path?token=abc",
    whole: "https://hooks.example/T1/B2/secret",
    headers: { "x-key": "abc" },
    secret: "s",
    plain: "kept",
  };
  assert.deepEqual(
    redactSecrets(config, {
      url: "url",
      whole: "wholeUrl",
      headers: "headerValues",
      secret: "value",
      absent: "value",
    }),
    {
      url: "https://********:********@example.com/path?token=********",
      whole: "********",
      headers: { "x-key": "********" },
      secret: "********",
      plain: "kept",
    },
  );
});

Deno.test("describeTarget names where a config delivers, never its secrets", () => {
  assert.deepEqual(describeTarget("webhook", { url: "https://a.example/x?k=1" }), {
    method: "POST",
    url: "https://a.example",
  });
  assert.equal(describeTarget("nope", {}), null);
});

Deno.test("mail sending is a capability of the connectors that send mail: SMTP's alone", () => {
  const connectors = createConnectors(testConfig());
  try {
    const senders = DESTINATION_TYPES.filter((type) => connectors[type].mail !== undefined);
    assert.deepEqual(senders, ["smtp"]);
    assert.equal(typeof connectors.smtp.mail?.sendMail, "function");
  } finally {
    connectors.close();
  }
});
