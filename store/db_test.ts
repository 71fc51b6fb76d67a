import assert from "node:assert/strict";
import { closeDb, openDb } from "./db.ts";
import { createSealer } from "./sealing.ts";

const modeOf = (path: string) => Deno.statSync(path).mode! & 0o777;

Deno.test("a local KV file and its -wal and -shm files are created 0600, and an existing 0644 file is tightened", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
    const fresh = `${dir}/fresh.kv`;
    const db = await openDb(fresh, sealer, { queues: false });
    await db.kv.set(["x"], 1);
    for (const path of [fresh, `${fresh}-wal`, `${fresh}-shm`]) {
      assert.equal(modeOf(path).toString(8), "600", path);
    }
    closeDb(db);

    const old = `${dir}/old.kv`;
    await Deno.writeFile(old, new Uint8Array(0), { mode: 0o644 });
    await Deno.chmod(old, 0o644);
    const reopened = await openDb(old, sealer, { queues: false });
    await reopened.kv.set(["x"], 1);
    for (const path of [old, `${old}-wal`, `${old}-shm`]) {
      assert.equal(modeOf(path).toString(8), "600", path);
    }
    closeDb(reopened);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
