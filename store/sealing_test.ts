import assert from "node:assert/strict";
import { createSealer, newKey, openJson, sealJson, sha256Hex } from "./sealing.ts";

const KEY = new Uint8Array(32).fill(9);

Deno.test("a sealed value opens with the same key and context, and only then", async () => {
  const sealer = await createSealer(KEY);
  const plaintext = new TextEncoder().encode("secret payload");
  const sealed = await sealer.seal(plaintext, "envelope:1");
  assert.equal(sealed.length, 12 + plaintext.length + 16);
  assert.ok(!new TextDecoder("latin1").decode(sealed).includes("secret"));
  assert.deepEqual(await sealer.open(sealed, "envelope:1"), plaintext);
  await assert.rejects(() => sealer.open(sealed, "envelope:2"));
  const other = await createSealer(new Uint8Array(32).fill(1));
  await assert.rejects(() => other.open(sealed, "envelope:1"));
  const tampered = sealed.slice();
  tampered[20] ^= 1;
  await assert.rejects(() => sealer.open(tampered, "envelope:1"));
});

Deno.test("the sealed layout is Web Crypto's AES-GCM: IV, ciphertext, tag", async () => {
  const sealer = await createSealer(KEY);
  const plaintext = new TextEncoder().encode("interoperable");
  const sealed = await sealer.seal(plaintext, "ctx");
  const key = await crypto.subtle.importKey("raw", KEY, "AES-GCM", false, ["decrypt"]);
  const opened = await crypto.subtle.decrypt(
    {
      name: "AES-GCM",
      iv: sealed.subarray(0, 12),
      additionalData: new TextEncoder().encode("ctx"),
    },
    key,
    sealed.subarray(12),
  );
  assert.deepEqual(new Uint8Array(opened), plaintext);
});

Deno.test("sealJson and openJson round-trip through base64", async () => {
  const sealer = await createSealer(KEY);
  const sealed = await sealJson(sealer, { password: "hunter2" }, "destination:x");
  assert.ok(!atob(sealed).includes("hunter2"));
  assert.deepEqual(await openJson(sealer, sealed, "destination:x"), { password: "hunter2" });
});

Deno.test("keys carry their prefix and 32 random bytes; hashes are SHA-256 hex", async () => {
  const a = newKey("sk");
  assert.match(a, /^sk_[A-Za-z0-9_-]{43}$/);
  assert.notEqual(newKey("sk"), a);
  assert.match(newKey("pk"), /^pk_/);
  assert.equal(
    await sha256Hex("abc"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
});
