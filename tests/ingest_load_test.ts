import assert from "node:assert/strict";
import { createIngestLoad } from "../delivery/ingest_load.ts";

Deno.test("acceptance counts as a burst from 8 submissions being stored, and 250 ms after", () => {
  let time = 1_000;
  const load = createIngestLoad(() => time);
  for (let i = 0; i < 7; i++) load.enter("a");
  assert.equal(load.burstMs("a"), null, "7 at once is steady traffic");
  load.enter("a");
  assert.equal(load.burstMs("a"), 0, "the 8th starts a burst");
  time += 100;
  assert.equal(load.burstMs("a"), 100);
  for (let i = 0; i < 8; i++) load.leave("a");
  time += 100;
  assert.equal(load.burstMs("a"), 200, "a shared commit landing is not the end of the burst");
  time += 100;
  assert.equal(load.burstMs("a"), null, "250 ms after the last sighting it is over");
  time += 10_000;
  for (let i = 0; i < 8; i++) load.enter("a");
  assert.equal(load.burstMs("a"), 0, "a new burst counts from its own start");
});

Deno.test("a burst lasts as long as submissions keep 8 in flight, with no new ones", () => {
  let time = 0;
  const load = createIngestLoad(() => time);
  for (let i = 0; i < 8; i++) load.enter("a");
  time += 60_000;
  assert.equal(load.burstMs("a"), 60_000);
  load.leave("a");
  assert.equal(load.burstMs("a"), null);
});

Deno.test("a burst is one organization's: another one storing a few is not in it", () => {
  const time = 0;
  const load = createIngestLoad(() => time);
  for (let i = 0; i < 8; i++) load.enter("flooded");
  for (let i = 0; i < 4; i++) load.enter("other");
  assert.equal(load.burstMs("flooded"), 0);
  assert.equal(load.burstMs("other"), null);
  assert.equal(load.burstMs("unknown"), null);
  // Eight in flight across two organizations is no burst for either.
  for (let i = 0; i < 4; i++) load.leave("flooded");
  for (let i = 0; i < 4; i++) load.enter("third");
  assert.equal(load.burstMs("third"), null);
});
