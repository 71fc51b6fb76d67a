import assert from "node:assert/strict";
import { createCipheriv } from "node:crypto";
import {
  createSealer,
  keyIdOf,
  newKey,
  openJson,
  sealJson,
  sha256Hex,
  UnknownSealingKeyError,
} from "./sealing.ts";

const KEY = new Uint8Array(32).fill(9);

Deno.test("a sealed value opens with the same key and context, and only then", async () => {
  const sealer = await createSealer(KEY);
  const plaintext = new TextEncoder().encode("secret payload");
  const sealed = await sealer.seal(plaintext, "envelope:1");
  assert.equal(sealed.length, 1 + 4 + 12 + plaintext.length + 16);
  assert.ok(!new TextDecoder("latin1").decode(sealed).includes("secret"));
  assert.deepEqual(await sealer.open(sealed, "envelope:1"), plaintext);
  await assert.rejects(() => sealer.open(sealed, "envelope:2"));
  const other = await createSealer(new Uint8Array(32).fill(1));
  await assert.rejects(() => other.open(sealed, "envelope:1"));
  const tampered = sealed.slice();
  tampered[20] ^= 1;
  await assert.rejects(() => sealer.open(tampered, "envelope:1"));
});

Deno.test("the sealed layout: version 1, the key's id, then Web Crypto's AES-GCM", async () => {
  const sealer = await createSealer(KEY);
  const plaintext = new TextEncoder().encode("interoperable");
  const sealed = await sealer.seal(plaintext, "ctx");
  assert.equal(sealed[0], 1);
  assert.equal(new Uint8Array(sealed.subarray(1, 5)).toHex(), keyIdOf(KEY));
  assert.equal(sealer.keyIds[0], keyIdOf(KEY));
  const key = await crypto.subtle.importKey("raw", KEY, "AES-GCM", false, ["decrypt"]);
  const opened = await crypto.subtle.decrypt(
    {
      name: "AES-GCM",
      iv: sealed.subarray(5, 17),
      additionalData: new TextEncoder().encode("ctx"),
    },
    key,
    sealed.subarray(17),
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

const OLD = new Uint8Array(32).fill(1);
const NEW = new Uint8Array(32).fill(2);
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

/** A value in the layout from before key ids: IV, ciphertext, tag. */
function sealedWithoutId(key: Uint8Array, plaintext: string, context: string) {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  cipher.setAAD(new TextEncoder().encode(context));
  const body = cipher.update(new TextEncoder().encode(plaintext));
  return new Uint8Array([...iv, ...body, ...cipher.final(), ...cipher.getAuthTag()]);
}

Deno.test("key ids: 8 hex characters, one per key, not the key's plain hash", async () => {
  assert.match(keyIdOf(OLD), /^[0-9a-f]{8}$/);
  assert.notEqual(keyIdOf(OLD), keyIdOf(NEW));
  assert.equal(keyIdOf(OLD), keyIdOf(OLD.slice()));
  const plainHash = new Uint8Array(await crypto.subtle.digest("SHA-256", OLD)).toHex();
  assert.ok(!plainHash.startsWith(keyIdOf(OLD)));
});

Deno.test("a ring seals with its current key and opens with every key", async () => {
  const before = await createSealer(OLD);
  const ring = await createSealer(NEW, [OLD]);
  assert.deepEqual(ring.keyIds, [keyIdOf(NEW), keyIdOf(OLD)]);
  const enc = new TextEncoder();
  const underOld = await before.seal(enc.encode("old"), "c");
  const underNew = await ring.seal(enc.encode("new"), "c");
  assert.equal(new Uint8Array(underNew.subarray(1, 5)).toHex(), keyIdOf(NEW));
  assert.equal(text(await ring.open(underOld, "c")), "old");
  assert.equal(text(await ring.open(underNew, "c")), "new");
  assert.deepEqual(await ring.openReporting(underOld, "c"), {
    plaintext: enc.encode("old"),
    keyId: keyIdOf(OLD),
    current: false,
  });
  assert.equal((await ring.openReporting(underNew, "c")).current, true);
  // The first step of a rotation: the new key accepted, the old still sealing.
  const accepting = await createSealer(OLD, [NEW]);
  assert.equal(text(await accepting.open(underNew, "c")), "new");
  assert.equal((await accepting.openReporting(underNew, "c")).current, false);
  // The context still binds the value with a ring.
  await assert.rejects(() => ring.open(underOld, "other"));
});

Deno.test("values sealed before key ids open with whichever ring key sealed them", async () => {
  const legacy = sealedWithoutId(OLD, "stored long ago", "destination:d1");
  assert.equal(
    text(await (await createSealer(OLD)).open(legacy, "destination:d1")),
    "stored long ago",
  );
  const ring = await createSealer(NEW, [OLD]);
  const opened = await ring.openReporting(legacy, "destination:d1");
  assert.equal(text(opened.plaintext), "stored long ago");
  assert.deepEqual([opened.keyId, opened.current], [keyIdOf(OLD), false]);
  // Even one whose IV happens to start like a header naming a ring key.
  const iv = new Uint8Array([1, ...Uint8Array.fromHex(keyIdOf(NEW)), 7, 7, 7, 7, 7, 7, 7]);
  const cipher = createCipheriv("aes-256-gcm", OLD, iv);
  cipher.setAAD(new TextEncoder().encode("c"));
  const body = cipher.update(new TextEncoder().encode("look-alike"));
  const collided = new Uint8Array([...iv, ...body, ...cipher.final(), ...cipher.getAuthTag()]);
  assert.equal(text(await ring.open(collided, "c")), "look-alike");
});

Deno.test("a value under a key the ring lacks is an UnknownSealingKeyError naming it", async () => {
  const other = await createSealer(NEW);
  const sealed = await other.seal(new TextEncoder().encode("x"), "c");
  const ring = await createSealer(OLD);
  await assert.rejects(() => ring.open(sealed, "c"), (error) => {
    assert.ok(error instanceof UnknownSealingKeyError);
    assert.equal(error.keyId, keyIdOf(NEW));
    assert.match(error.message, new RegExp(`key ${keyIdOf(NEW)}`));
    return true;
  });
  await assert.rejects(
    () => ring.open(sealedWithoutId(NEW, "x", "c"), "c"),
    (error) => error instanceof UnknownSealingKeyError && error.keyId === null,
  );
  // A damaged value under a known key is not mistaken for a missing key.
  const damaged = (await ring.seal(new TextEncoder().encode("x"), "c")).slice();
  damaged[damaged.length - 1] ^= 1;
  await assert.rejects(() => ring.open(damaged, "c"), (error) => {
    assert.ok(!(error instanceof UnknownSealingKeyError));
    return true;
  });
});

Deno.test("pseudonyms come from the current key; any ring key's are recognised", async () => {
  const before = await createSealer(OLD);
  const ring = await createSealer(NEW, [OLD]);
  assert.notEqual(ring.pseudonym("a"), before.pseudonym("a"));
  assert.ok(ring.isPseudonym("a", before.pseudonym("a")));
  assert.ok(ring.isPseudonym("a", ring.pseudonym("a")));
  assert.ok(!ring.isPseudonym("b", before.pseudonym("a")));
  assert.ok(!before.isPseudonym("a", ring.pseudonym("a")));
  assert.ok(!ring.isPseudonym("a", ""));
});
