import assert from "node:assert/strict";
import { forbiddenHttp, kvAccesses, mustBeHttpFree } from "./check_layers.ts";

Deno.test("kvAccesses finds KV reached outside store/, and allows it in store/ and tests", () => {
  const source = [
    "const form = (await db.kv.get<FormRecord>(formKey(id))).value;",
    "const kv = await Deno.openKv(path);",
    "const op = db.kv.atomic();",
    "const config = { kvPath: e.KV_PATH };",
  ].join("\n");
  assert.deepEqual(kvAccesses("delivery/confirmation.ts", source), [
    "delivery/confirmation.ts:1: const form = (await db.kv.get<FormRecord>(formKey(id))).value;",
    "delivery/confirmation.ts:2: const kv = await Deno.openKv(path);",
    "delivery/confirmation.ts:3: const op = db.kv.atomic();",
  ]);
  assert.deepEqual(kvAccesses("store/forms.ts", source), []);
  assert.deepEqual(kvAccesses("tests/helpers/kv.ts", source), []);
  assert.deepEqual(kvAccesses("delivery/engine_test.ts", source), []);
});

Deno.test("forbiddenHttp names the routes/ modules and Hono found in a module's graph", () => {
  const root = "file:///repo";
  assert.deepEqual(
    forbiddenHttp({
      modules: [
        { specifier: `${root}/metrics.ts`, dependencies: [{ specifier: "./routes/http.ts" }] },
        { specifier: `${root}/routes/http.ts`, dependencies: [{ specifier: "hono" }] },
        { specifier: "npm:/hono@4.13.19/dist/index.js" },
        { specifier: `${root}/connectors/registry.ts` },
      ],
    }),
    ["./routes/http.ts", `${root}/routes/http.ts`, "hono", "npm:/hono@4.13.19/dist/index.js"],
  );
  assert.deepEqual(forbiddenHttp({ modules: [{ specifier: `${root}/metrics.ts` }] }), []);
});

Deno.test("metrics.ts and every module of ingest/ must be free of Hono and routes/; tests and routes/ need not", () => {
  for (const path of ["metrics.ts", "ingest/steps.ts", "ingest/pipeline.ts", "ingest/refusal.ts"]) {
    assert.ok(mustBeHttpFree(path), path);
  }
  for (const path of ["ingest/steps_test.ts", "routes/ingest.ts", "app.ts"]) {
    assert.ok(!mustBeHttpFree(path), path);
  }
  // What the check reports for an ingest module that reaches the routes: both named.
  assert.deepEqual(
    forbiddenHttp({
      modules: [{
        specifier: "file:///repo/ingest/steps.ts",
        dependencies: [{ specifier: "../routes/http.ts" }, { specifier: "npm:hono@4" }],
      }],
    }),
    ["../routes/http.ts", "npm:hono@4"],
  );
});
