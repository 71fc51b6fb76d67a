import assert from "node:assert/strict";
import { createSealer } from "../store/sealing.ts";
import {
  pageToken,
  readPageToken,
  spamRuleCaught,
  type SpamRules,
  spamRulesCaught,
  spamRulesSchema,
  TIME_TRAP_FIELD,
  TOKEN_MAX_AGE_MS,
} from "./spam.ts";

const sealer = await createSealer(crypto.getRandomValues(new Uint8Array(32)));
const publicKey = "pk_" + "a".repeat(40);
const now = Date.UTC(2026, 10, 24, 12);
const caught = async (rules: SpamRules, payload: Record<string, unknown>, at = now) =>
  (await spamRuleCaught(rules, { payload, sealer, publicKey, orgId: "org_spam", now: at })).rule;

Deno.test("time trap: a real page time passes, one too recent, forged or expired is caught, a missing one apart", async () => {
  const rules = { minSeconds: 3 };
  const loaded = pageToken(sealer, publicKey, now - 10_000);
  const payload = { name: "Ada", [TIME_TRAP_FIELD]: loaded };
  const verdict = await spamRuleCaught(rules, { payload, sealer, publicKey, orgId: "o", now });
  assert.deepEqual(verdict, {
    rule: null,
    pageToken: { loadedAt: now - 10_000, signature: loaded.split(".")[2] },
  }, "the token to record as used");
  assert.equal(TIME_TRAP_FIELD in payload, false, "the page's field is not delivered");

  const tooSoon = pageToken(sealer, publicKey, now - 1_000);
  assert.equal(await caught(rules, { [TIME_TRAP_FIELD]: tooSoon }), "time_trap");
  // An older time with the signature of a real (recent) token: the signature is of the time.
  const [, nonce, signature] = tooSoon.split(".");
  const forged = `${now - 60_000}.${nonce}.${signature}`;
  assert.equal(await caught(rules, { [TIME_TRAP_FIELD]: forged }), "time_trap");
  const otherForm = pageToken(sealer, "pk_" + "b".repeat(40), now - 10_000);
  assert.equal(await caught(rules, { [TIME_TRAP_FIELD]: otherForm }), "time_trap");
  // No token at all: a page on an old snippet, told apart so the owner can fix the page.
  assert.equal(await caught(rules, { name: "no token" }), "no_page_token");
  assert.equal(await caught(rules, { [TIME_TRAP_FIELD]: "" }), "no_page_token");
  const expired = pageToken(sealer, publicKey, now - TOKEN_MAX_AGE_MS - 1);
  assert.equal(await caught(rules, { [TIME_TRAP_FIELD]: expired }), "time_trap");
  const lastMoment = pageToken(sealer, publicKey, now - TOKEN_MAX_AGE_MS);
  assert.equal(await caught(rules, { [TIME_TRAP_FIELD]: lastMoment }), null);
  const future = pageToken(sealer, publicKey, now + 60_000);
  assert.equal(await caught(rules, { [TIME_TRAP_FIELD]: future }), "time_trap");
});

Deno.test("spam rules: links over the maximum, blocked words and blocked patterns", async () => {
  const links = { message: "see https://a.example and http://b.example", site: "www.c.example" };
  assert.equal(await caught({ maxLinks: 3 }, links), null);
  assert.equal(await caught({ maxLinks: 2 }, links), "links");
  assert.equal(await caught({ maxLinks: 0 }, { nested: { deep: ["https://x.example"] } }), "links");

  const words = { blockedWords: ["Crypto Offer"] };
  assert.equal(await caught(words, { message: "A great CRYPTO offer for you" }), "blocked_words");
  assert.equal(await caught(words, { message: "Hello" }), null);

  const patterns = { blockedPatterns: ["\\bs[e3]o\\b"] };
  assert.equal(await caught(patterns, { message: "cheap S3O services" }), "blocked_patterns");
  assert.equal(await caught(patterns, { message: "seoul" }), null);
});

Deno.test("spam rules: throw-away mail domains in the named field, subdomains included", async () => {
  const rules = { disposableEmailField: "email" };
  assert.equal(await caught(rules, { email: "bot@mailinator.com" }), "disposable");
  assert.equal(await caught(rules, { email: "bot@eu.mailinator.com" }), "disposable");
  assert.equal(await caught(rules, { email: "ada@example.org" }), null);
  assert.equal(await caught(rules, { other: "bot@mailinator.com" }), null, "only the named field");
});

Deno.test("spam rules are validated: bounded patterns only, sane limits", () => {
  assert.equal(spamRulesSchema.safeParse({ minSeconds: 3, maxLinks: 2 }).success, true);
  assert.equal(spamRulesSchema.safeParse({ blockedPatterns: ["(a+)+$"] }).success, false);
  assert.equal(spamRulesSchema.safeParse({ minSeconds: 0 }).success, false);
  assert.equal(spamRulesSchema.safeParse({ unknown: true }).success, false);
});

Deno.test("time trap across a key rotation: a page served under any ring key passes", async () => {
  const oldKey = crypto.getRandomValues(new Uint8Array(32));
  const newKey = crypto.getRandomValues(new Uint8Array(32));
  const before = await createSealer(oldKey);
  const after = await createSealer(newKey, [oldKey]);
  const rules = { minSeconds: 3 };
  const verdict = async (issuer: typeof before, reader: typeof before) => {
    const token = pageToken(issuer, publicKey, now - 10_000);
    const payload = { [TIME_TRAP_FIELD]: token };
    return (await spamRuleCaught(rules, { payload, sealer: reader, publicKey, orgId: "o", now }))
      .rule;
  };
  assert.equal(await verdict(before, after), null, "served before the rotation");
  assert.equal(
    await verdict(after, await createSealer(oldKey, [newKey])),
    null,
    "new key accepted",
  );
  assert.equal(await verdict(after, before), "time_trap", "a key the reader lacks");
});

Deno.test("page tokens minted in the same millisecond differ, and each is good", () => {
  const loadedAt = now - 10_000;
  const first = pageToken(sealer, publicKey, loadedAt);
  const second = pageToken(sealer, publicKey, loadedAt);
  assert.notEqual(first, second);
  const read = (token: string) => readPageToken(sealer, { publicKey, token, now });
  assert.equal(read(first)?.loadedAt, loadedAt);
  assert.equal(read(second)?.loadedAt, loadedAt);
  assert.notEqual(read(first)?.signature, read(second)?.signature, "each recorded apart");
  // The random part is signed: another one with the same signature is a forgery.
  const [time, , signature] = first.split(".");
  const [, otherNonce] = second.split(".");
  assert.equal(read(`${time}.${otherNonce}.${signature}`), null);
  // A token of the older form (the time alone signed), from a page loaded before, is read.
  const legacy = `${loadedAt}.${sealer.pseudonym(`page-token\0${publicKey}\0${loadedAt}`)}`;
  assert.equal(read(legacy)?.loadedAt, loadedAt);
});

Deno.test("spamRulesCaught judges each rule alone and names every one that catches; spamRuleCaught stops at the first", async () => {
  const rules = { minSeconds: 3, maxLinks: 1, blockedWords: ["casino"] };
  const fast = () => ({
    message: "casino https://a.example https://b.example",
    [TIME_TRAP_FIELD]: pageToken(sealer, publicKey, now - 1000),
  });
  const input = (payload: Record<string, unknown>) => ({
    payload,
    sealer,
    publicKey,
    orgId: "org_spam",
    now,
  });
  const payload = fast();
  assert.deepEqual(await spamRulesCaught(rules, input(payload)), [
    "time_trap",
    "links",
    "blocked_words",
  ]);
  assert.equal(TIME_TRAP_FIELD in payload, false, "the page's field is taken out either way");
  assert.deepEqual(await spamRuleCaught(rules, input(fast())), { rule: "time_trap" });
  assert.deepEqual(await spamRulesCaught(rules, input({ message: "hello" })), ["no_page_token"]);
  const person = { message: "hello", [TIME_TRAP_FIELD]: pageToken(sealer, publicKey, now - 9000) };
  assert.deepEqual(await spamRulesCaught(rules, input(person)), []);
});
