import assert from "node:assert/strict";
import { createIngestLoad } from "../delivery/ingest_load.ts";

Deno.test("acceptance counts as a burst from 8 submissions being stored, and 250 ms after", () => {
  let time = 1_000;
  const load = createIngestLoad(() => time);
  for (let i = 0; i < 7; i++) load.enter();
  assert.equal(load.burstMs(), null, "7 at once is steady traffic");
  load.enter();
  assert.equal(load.burstMs(), 0, "the 8th starts a burst");
  time += 100;
  assert.equal(load.burstMs(), 100);
  for (let i = 0; i < 8; i++) load.leave();
  time += 100;
  assert.equal(load.burstMs(), 200, "a shared commit landing is not the end of the burst");
  time += 100;
  assert.equal(load.burstMs(), null, "250 ms after the last sighting it is over");
  time += 10_000;
  for (let i = 0; i < 8; i++) load.enter();
  assert.equal(load.burstMs(), 0, "a new burst counts from its own start");
});

Deno.test("a burst lasts as long as submissions keep 8 in flight, with no new ones", () => {
  let time = 0;
  const load = createIngestLoad(() => time);
  for (let i = 0; i < 8; i++) load.enter();
  time += 60_000;
  assert.equal(load.burstMs(), 60_000);
  load.leave();
  assert.equal(load.burstMs(), null);
});
