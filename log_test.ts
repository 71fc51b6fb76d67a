import assert from "node:assert/strict";
import { createLogger } from "./log.ts";

/** A logger at `level` writing into an array. */
function capture(level: "debug" | "info" | "warn" = "info") {
  const lines: string[] = [];
  return { lines, logger: createLogger(level, (line) => lines.push(line)) };
}

Deno.test("a line is one JSON object: time, level and message first, then the fields in order", () => {
  const { lines, logger } = capture();
  const before = Date.now();
  logger.info("submission accepted", { formId: "f1", status: 202, ms: 1.5, gone: undefined });
  logger.warn("no fields");
  assert.equal(lines.length, 2);
  const line = JSON.parse(lines[0]);
  assert.deepEqual(Object.keys(line), ["time", "level", "msg", "formId", "status", "ms"]);
  assert.equal(line.level, "info");
  assert.equal(line.msg, "submission accepted");
  assert.deepEqual([line.formId, line.status, line.ms], ["f1", 202, 1.5]);
  const at = Date.parse(line.time);
  assert.ok(at >= before && at <= Date.now(), line.time);
  assert.deepEqual(Object.keys(JSON.parse(lines[1])), ["time", "level", "msg"]);
  assert.equal(JSON.parse(lines[1]).level, "warn");
});

Deno.test("a message or field with quotes, line breaks or other text stays one valid line", () => {
  const { lines, logger } = capture();
  logger.info('a "quoted"\nmessage', { reason: 'say "hi"\r\n', nested: { list: [1, "two"] } });
  assert.equal(lines.length, 1);
  assert.ok(!lines[0].includes("\n"));
  const line = JSON.parse(lines[0]);
  assert.equal(line.msg, 'a "quoted"\nmessage');
  assert.equal(line.reason, 'say "hi"\r\n');
  assert.deepEqual(line.nested, { list: [1, "two"] });
});

Deno.test("a field named like the line's own replaces it, as one object would", () => {
  const { lines, logger } = capture();
  logger.info("outer", { msg: "inner", level: "custom" });
  const line = JSON.parse(lines[0]);
  assert.equal(line.msg, "inner");
  assert.equal(line.level, "custom");
  assert.deepEqual(Object.keys(line), ["time", "level", "msg"]);
});

Deno.test("lines below the level are not written", () => {
  const { lines, logger } = capture("warn");
  logger.debug("d");
  logger.info("i");
  logger.warn("w");
  logger.error("e");
  assert.deepEqual(lines.map((line) => JSON.parse(line).msg), ["w", "e"]);
});
