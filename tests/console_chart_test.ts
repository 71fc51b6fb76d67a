import assert from "node:assert/strict";
import { hourlyCounts } from "../console/static/deliveries.js";

Deno.test("the console's 24 h chart counts outcomes per hour of submission, oldest first", () => {
  const now = Date.parse("2026-11-22T12:00:00Z");
  const at = (hoursAgo: number, status: string) => ({
    submittedAt: new Date(now - hoursAgo * 3600_000).toISOString(),
    status,
  });
  const hours = hourlyCounts([
    at(0, "delivered"),
    at(0.5, "failed"),
    at(1.5, "retrying"),
    at(1.2, "held"),
    at(23.9, "delivered"),
    at(24.1, "delivered"), // older than 24 h: not counted
    at(-1, "delivered"), // in the future (clock skew): not counted
  ], now);
  assert.equal(hours.length, 24);
  assert.deepEqual(hours[23], { delivered: 1, retrying: 0, held: 0, failed: 1 });
  assert.deepEqual(hours[22], { delivered: 0, retrying: 1, held: 1, failed: 0 });
  assert.deepEqual(hours[0], { delivered: 1, retrying: 0, held: 0, failed: 0 });
  assert.equal(hours.reduce((n, h) => n + h.delivered + h.retrying + h.held + h.failed, 0), 5);
});
