import assert from "node:assert/strict";
import { z } from "zod";
import { redactSecrets } from "./descriptor.ts";
import {
  consoleDestinationTypes,
  describeTarget,
  DESCRIPTORS,
  DESTINATION_TYPES,
} from "./registry.ts";

Deno.test("every type has one descriptor, offered once to the console", () => {
  for (const type of DESTINATION_TYPES) assert.equal(DESCRIPTORS[type].type, type);
  const offered = consoleDestinationTypes().map((entry) => entry.type);
  assert.deepEqual([...offered].sort(), [...DESTINATION_TYPES].sort());
});

Deno.test("each console field and secret names a field of its type's documented config", () => {
  for (const type of DESTINATION_TYPES) {
    const descriptor = DESCRIPTORS[type];
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
    for (const name of used) assert.ok(names.has(name), `${type}.${name}`);
  }
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
