/**
 * Spam rules, a form's own and each optional: a minimum time between the page loading
 * and the submission (a signed time trap), a maximum number of links, blocked words and
 * patterns, and throw-away mail domains in a named field. A submission one of them
 * catches is answered like a honeypot catch: the visitor sees success, nothing is
 * delivered or kept, and the catch is counted per form and rule. A form without rules
 * costs one property check.
 *
 * The time trap: the page asks `GET /v1/f/:publicKey/page-token` when it loads and puts
 * the answer in the hidden field TIME_TRAP_FIELD. The token is the time of the request
 * and a keyed hash of it and the public key (sealer.pseudonym, keyed from the sealing
 * key): a bot cannot make an older one without the key. A token lets one submission
 * through, within TOKEN_MAX_AGE_MS: its use is recorded in the commit that accepts the
 * submission (store/submissions.ts), so a bot that fetched one token cannot reuse it,
 * even through another process. A missing, forged, expired or used token is caught
 * like one sent too soon.
 *
 * @module
 */
import { z } from "zod";
import type { Sealer } from "../store/sealing.ts";
import { compilePattern, matchBudget } from "./patterns.ts";
import { boundedPatternSchema } from "./routing.ts";

/** The hidden field the page's script fills with its page token. */
export const TIME_TRAP_FIELD = "_formrelay_loaded";
/** How long a page token is good for: a visitor who leaves a page open longer reloads it. */
export const TOKEN_MAX_AGE_MS = 2 * 3600 * 1000;

/** A form's spam rules, each optional. */
export const spamRulesSchema = z.strictObject({
  /** Seconds a person needs at least between loading the page and sending. */
  minSeconds: z.number().int().min(1).max(3600).optional(),
  /** Most links (`http://`, `https://`, `www.`) the payload's values may hold together. */
  maxLinks: z.number().int().min(0).max(100).optional(),
  /** Words or phrases refused anywhere in the payload's values (case-insensitive). */
  blockedWords: z.array(z.string().trim().min(1).max(100)).max(100).optional(),
  /** Bounded patterns (rules/patterns.ts) refused in any value's first 1 000 characters. */
  blockedPatterns: z.array(boundedPatternSchema).max(20).optional(),
  /** The field holding the visitor's email address, refused from throw-away domains. */
  disposableEmailField: z.string().min(1).max(100).optional(),
  /**
   * Observe mode: the rules only count what they would catch (per rule and day, in the
   * form's refusals) and every submission is delivered, so a rule can be tried first.
   */
  observe: z.boolean().optional(),
});

/** A form's spam rules. */
export type SpamRules = z.infer<typeof spamRulesSchema>;

/**
 * The rule that caught a submission. The time trap is told apart in two: `no_page_token`
 * (the page sent none: usually a page still on an old snippet, or a plain HTML form) and
 * `time_trap` (too soon, or a forged, other form's or stale token).
 */
export type SpamRule =
  | "no_page_token"
  | "time_trap"
  | "links"
  | "blocked_words"
  | "blocked_patterns"
  | "disposable";

/** Every rule, for metrics that start at zero. */
export const SPAM_RULES: SpamRule[] = [
  "no_page_token",
  "time_trap",
  "links",
  "blocked_words",
  "blocked_patterns",
  "disposable",
];

/**
 * What a page token's signature signs: the form's public key, the page's time and the token's
 * random part (tokens minted before they carried one sign the time alone).
 */
function signed(publicKey: string, issuedMs: number, nonce: string): string {
  const nonced = nonce === "" ? "" : `\0${nonce}`;
  return `page-token\0${publicKey}\0${issuedMs}${nonced}`;
}

/**
 * A page token for a form's page loaded at `now`: `<ms>.<random>.<signature>`. The random
 * part gives two pages loaded in the same millisecond tokens of their own, so the second
 * visitor's submission is not taken for a reuse of the first's token.
 */
export function pageToken(sealer: Sealer, publicKey: string, now: number): string {
  const nonce = crypto.getRandomValues(new Uint8Array(9)).toBase64({ alphabet: "base64url" });
  return `${now}.${nonce}.${sealer.pseudonym(signed(publicKey, now, nonce))}`;
}

/** A good page token: when its page loaded, and its signature (what records its use). */
export interface PageToken {
  loadedAt: number;
  signature: string;
}

/**
 * A page token's time and signature, or null when it is missing, forged or expired. A
 * token of the older form `<ms>.<signature>` (a page loaded before the random part was
 * added, good for TOKEN_MAX_AGE_MS at most) is still read.
 */
export function readPageToken(
  sealer: Sealer,
  { publicKey, token, now }: { publicKey: string; token: unknown; now: number },
): PageToken | null {
  if (typeof token !== "string" || token.length > 100) return null;
  const parts = token.split(".");
  if (parts.length !== 2 && parts.length !== 3) return null;
  const [time, nonce, sig] = parts.length === 3 ? parts : [parts[0], "", parts[1]];
  const issued = Number(time);
  if (!/^\d{1,15}$/.test(time) || issued > now || now - issued > TOKEN_MAX_AGE_MS) return null;
  if (parts.length === 3 && !/^[A-Za-z0-9_-]{1,24}$/.test(nonce)) return null;
  // Any key of the ring: a page served before a rotation, or by a process not yet rotated, is good.
  return typeof sig === "string" && sealer.isPseudonym(signed(publicKey, issued, nonce), sig)
    ? { loadedAt: issued, signature: sig }
    : null;
}

/** Every string value of a payload, nested ones too (at most `limit` of them). */
function stringsOf(payload: unknown, limit = 10_000): string[] {
  const found: string[] = [];
  const stack = [payload];
  while (stack.length > 0 && found.length < limit) {
    const value = stack.pop();
    if (typeof value === "string") found.push(value);
    else if (typeof value === "object" && value !== null) stack.push(...Object.values(value));
  }
  return found;
}

const LINK = /https?:\/\/|www\./gi;

function countLinks(values: string[]): number {
  let links = 0;
  for (const value of values) links += value.match(LINK)?.length ?? 0;
  return links;
}

let disposableDomains: Set<string> | null = null;
/** The maintained list of throw-away mail domains, loaded when a form first needs it. */
async function disposable(): Promise<Set<string>> {
  if (disposableDomains === null) {
    const list = await import("disposable-email-domains/index.json", { with: { type: "json" } });
    disposableDomains = new Set<string>(list.default);
  }
  return disposableDomains;
}

/** Whether an address's domain (or a parent domain of it) is a throw-away one. */
async function isDisposable(address: unknown): Promise<boolean> {
  if (typeof address !== "string") return false;
  const at = address.lastIndexOf("@");
  if (at < 0) return false;
  const domains = await disposable();
  const labels = address.slice(at + 1).trim().toLowerCase().split(".");
  for (let i = 0; i < labels.length - 1; i++) {
    if (domains.has(labels.slice(i).join("."))) return true;
  }
  return false;
}

/**
 * What a form's spam rules say of a payload: the rule that caught it, or none and the
 * page token to record as used when the submission is accepted (null without a time
 * trap).
 */
export type SpamVerdict = { rule: SpamRule } | { rule: null; pageToken: PageToken | null };

/** What the rules are judged on. */
interface SpamInput {
  payload: unknown;
  sealer: Sealer;
  publicKey: string;
  orgId: string;
  now: number;
}

/**
 * The rule of `rules` that catches a payload, if any: the first in the order of
 * SPAM_RULES, the others not asked (enforced, a catch is counted once, under the rule
 * that caught it). Takes the time-trap field out of the payload (it is the page's, not
 * the visitor's). Patterns are matched in the lane of `orgId` (patterns.ts).
 */
export async function spamRuleCaught(rules: SpamRules, input: SpamInput): Promise<SpamVerdict> {
  const { caught, pageToken } = await judge(rules, input, false);
  return caught.length > 0 ? { rule: caught[0] } : { rule: null, pageToken };
}

/**
 * Every rule of `rules` that would catch a payload, each judged alone: what observe mode
 * counts, so that an owner sees what each rule would do before enforcing it (a fast post
 * with two links counts for the time trap and for the link limit). Takes the time-trap
 * field out of the payload like spamRuleCaught.
 */
export async function spamRulesCaught(rules: SpamRules, input: SpamInput): Promise<SpamRule[]> {
  return (await judge(rules, input, true)).caught;
}

/** The rules that catch a payload, in SPAM_RULES order: the first only, or `every` one. */
async function judge(
  rules: SpamRules,
  { payload, sealer, publicKey, orgId, now }: SpamInput,
  every: boolean,
): Promise<{ caught: SpamRule[]; pageToken: PageToken | null }> {
  const fields = typeof payload === "object" && payload !== null && !Array.isArray(payload)
    ? payload as Record<string, unknown>
    : {};
  const token = fields[TIME_TRAP_FIELD];
  delete fields[TIME_TRAP_FIELD];
  const caught: SpamRule[] = [];
  /** Notes a catch; true when judging stops there. */
  const catches = (rule: SpamRule) => {
    caught.push(rule);
    return !every;
  };
  const verdict = () => ({ caught, pageToken: caught.length > 0 ? null : pageToken });
  let pageToken: PageToken | null = null;
  if (rules.minSeconds !== undefined) {
    if (token === undefined || token === "") {
      if (catches("no_page_token")) return verdict();
    } else {
      pageToken = readPageToken(sealer, { publicKey, token, now });
      if (pageToken === null || now - pageToken.loadedAt < rules.minSeconds * 1000) {
        if (catches("time_trap")) return verdict();
      }
    }
  }
  const values = stringsOf(payload);
  if (rules.maxLinks !== undefined && countLinks(values) > rules.maxLinks) {
    if (catches("links")) return verdict();
  }
  if (rules.blockedWords?.length) {
    const words = rules.blockedWords.map((word) => word.toLowerCase());
    const lower = values.map((value) => value.toLowerCase());
    if (lower.some((v) => words.some((w) => v.includes(w)))) {
      if (catches("blocked_words")) return verdict();
    }
  }
  if (rules.blockedPatterns?.length) {
    const budget = matchBudget({ lane: orgId });
    for (const source of rules.blockedPatterns) {
      if (await budget.anyMatches(compilePattern(source), values)) {
        if (catches("blocked_patterns")) return verdict();
        break;
      }
    }
  }
  if (
    rules.disposableEmailField !== undefined &&
    await isDisposable(fields[rules.disposableEmailField])
  ) catches("disposable");
  return verdict();
}
