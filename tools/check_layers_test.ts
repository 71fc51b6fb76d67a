import assert from "node:assert/strict";
import { forbiddenForMetrics, kvAccesses } from "./check_layers.ts";

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

Deno.test("forbiddenForMetrics names the routes/ modules and Hono found in metrics.ts's graph", () => {
  const root = "file:///repo";
  assert.deepEqual(
    forbiddenForMetrics({
      modules: [
        { specifier: `${root}/metrics.ts`, dependencies: [{ specifier: "./routes/http.ts" }] },
        { specifier: `${root}/routes/http.ts`, dependencies: [{ specifier: "hono" }] },
        { specifier: "npm:/hono@4.13.19/dist/index.js" },
        { specifier: `${root}/connectors/registry.ts` },
      ],
    }),
    ["./routes/http.ts", `${root}/routes/http.ts`, "hono", "npm:/hono@4.13.19/dist/index.js"],
  );
  assert.deepEqual(forbiddenForMetrics({ modules: [{ specifier: `${root}/metrics.ts` }] }), []);
});
