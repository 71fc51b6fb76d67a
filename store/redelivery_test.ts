import assert from "node:assert/strict";
import { parseDeliveryId } from "./redelivery.ts";

Deno.test("parseDeliveryId reads <submissionId>.<destinationId> and nothing else", () => {
  const submissionId = crypto.randomUUID();
  const destinationId = crypto.randomUUID();
  assert.deepEqual(parseDeliveryId(`${submissionId}.${destinationId}`), {
    submissionId,
    destinationId,
  });
  for (
    const bad of [
      submissionId,
      `${submissionId}.`,
      `${submissionId}/${destinationId}`,
      `${submissionId}.${destinationId}.x`,
      `x${submissionId}.${destinationId}`,
      "",
    ]
  ) {
    assert.equal(parseDeliveryId(bad), null, bad);
  }
});
