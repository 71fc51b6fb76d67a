/**
 * The outbound budget: what one organization may send to third parties, so that no
 * tenant turns formrelay into an amplifier against a host or the platform relay.
 * Every delivery attempt and every test send takes its share before it sends:
 *
 * - requests and bytes per organization, and per organization and target host
 *   (`host[:port]` of a URL, an SMTP relay's `host:port`), over OUTBOUND_WINDOW_SECONDS;
 * - for the platform relay (SMTP Variant B), recipients per organization per minute and
 *   per UTC day (the day's count is kept in KV: store/relay_usage.ts).
 *
 * Past a budget the answer says until when: a delivery is deferred until then (its
 * attempt not counted, its job kept: nothing is lost while its data lives), a test send
 * is answered 429 with Retry-After. The per-window budgets (and the test-send limits
 * registered with share) are counted in memory and shared between processes on one KV
 * every second (the engine exchanges usage and charge: store/process_shares.ts), so
 * together they spend about one budget; the daily relay cap is counted in KV. A process
 * starting spends nothing before its first exchange: it takes up what the others' buckets
 * lack (join), and between two exchanges each of P processes spends at most its part
 * (token_buckets.ts). A host appears in a bucket's key as a digest of fixed length
 * (hostDigest), so what a process shares is as large for a 250-character host as for "a.b".
 *
 * @module
 */
import { createHash } from "node:crypto";
import type { Config } from "../config.ts";
import { describeTarget } from "../connectors/registry.ts";
import type { Db } from "../store/db.ts";
import type { UsageRow } from "../store/process_shares.ts";
import { addRelayUsage, nextUtcDay, relayUsage } from "../store/relay_usage.ts";
import { createTokenBuckets, type TokenBuckets } from "./token_buckets.ts";

/** One outbound request as the budget sees it. */
export interface OutboundRequest {
  orgId: string;
  /** Where it goes: `host[:port]`. */
  host: string;
  /** About how many bytes it carries. */
  bytes: number;
  /** Recipients when it goes through the platform relay, else 0. */
  relayRecipients: number;
}

/** Granted, or refused until `retryAt` (epoch ms) with the reason. */
export type BudgetAnswer = { ok: true } | { ok: false; retryAt: number; reason: string };

/** The budget of every organization's outbound traffic in this process. */
export interface OutboundBudget {
  /** Takes the request's share of every budget it falls under, or says when it could go. */
  take(request: OutboundRequest, now: number): Promise<BudgetAnswer>;
  /** The request an organization's send to a destination makes (see outboundRequestOf). */
  requestOf(
    destination: { type: string; config: unknown },
    options: { orgId: string; bytes: number },
  ): OutboundRequest;
  /** Adds buckets kept elsewhere (test sends) to those shared with other processes, under `name`. */
  share(name: string, buckets: TokenBuckets): void;
  /** What this process took from every shared budget since the last call. */
  usage(): UsageRow[];
  /**
   * Charges what other processes took to this process's buckets. A row whose key ends in
   * `|*` stands for the rest of an organization's keys (past what a record lists of one):
   * each of its buckets here not named in `rows` is charged its amount.
   */
  charge(rows: UsageRow[], now: number): void;
  /** What this process's buckets that are not full lack, as rows (amount: the lack). */
  debts(now: number): UsageRow[];
  /**
   * The other processes' debts and their number, this one included, at an exchange: the
   * debts lower buckets that lack less (a process starting joins the others' levels), the
   * number sets each one's part until the next exchange.
   */
  join(others: { debts: UsageRow[]; processes: number }, now: number): void;
  /** Takes wait for `joined` (the first exchange), so that nothing is spent before it. */
  holdUntil(joined: Promise<unknown>): void;
}

/**
 * A host's stand-in in a budget's key: 12 characters of its SHA-256, whatever its
 * length (two hosts of one organization sharing one would share a budget: 2⁻⁷² a pair).
 */
export function hostDigest(host: string): string {
  const name = host.toLowerCase();
  let digest = hostDigests.get(name);
  if (digest === undefined) {
    if (hostDigests.size >= MAX_HOST_DIGESTS) hostDigests.clear();
    digest = createHash("sha256").update(name).digest("base64url").slice(0, 12);
    hostDigests.set(name, digest);
  }
  return digest;
}

/** Digests made, by host: a delivery takes from its host's budget, and a hash is not free. */
const hostDigests = new Map<string, string>();
/** Hosts whose digests are kept at most (a few dozen bytes each). */
const MAX_HOST_DIGESTS = 10_000;

const MINUTE_MS = 60_000;

/** The budget configured by OUTBOUND_* and PLATFORM_SMTP_ORG_*. */
export function createOutboundBudget(
  db: Db,
  config: Pick<Config, "outbound" | "relayLimits" | "platformSmtp">,
): OutboundBudget {
  const platformHost = config.platformSmtp === null
    ? null
    : `${config.platformSmtp.host}:${config.platformSmtp.port}`;
  const { windowMs } = config.outbound;
  const perWindow = (capacity: number) => createTokenBuckets({ capacity, windowMs });
  const orgRequests = perWindow(config.outbound.orgRequests);
  const orgBytes = perWindow(config.outbound.orgBytes);
  const hostRequests = perWindow(config.outbound.hostRequests);
  const hostBytes = perWindow(config.outbound.hostBytes);
  const relayMinute = createTokenBuckets({
    capacity: config.relayLimits.orgPerMinute,
    windowMs: MINUTE_MS,
  });
  const perDay = config.relayLimits.orgPerDay;
  const shared = new Map<string, TokenBuckets>([
    ["orgRequests", orgRequests],
    ["orgBytes", orgBytes],
    ["hostRequests", hostRequests],
    ["hostBytes", hostBytes],
    ["relayMinute", relayMinute],
  ]);

  let hold: Promise<unknown> | null = null;

  return {
    share: (name, buckets) => void shared.set(name, buckets),
    usage() {
      const rows: UsageRow[] = [];
      for (const [budget, buckets] of shared) {
        for (const [key, amount] of buckets.takenSince()) rows.push({ budget, key, amount });
      }
      return rows;
    },
    charge(rows, now) {
      const named = new Set(rows.map((row) => `${row.budget} ${row.key}`));
      for (const { budget, key, amount } of rows) {
        const buckets = shared.get(budget);
        if (!key.endsWith("|*")) {
          buckets?.charge(key, amount, now);
          continue;
        }
        const prefix = key.slice(0, -1);
        const except = new Set<string>();
        for (const name of named) {
          if (name.startsWith(`${budget} ${prefix}`)) except.add(name.slice(budget.length + 1));
        }
        buckets?.chargeEach(prefix, amount, now, except);
      }
    },
    debts(now) {
      const rows: UsageRow[] = [];
      for (const [budget, buckets] of shared) {
        for (const [key, amount] of buckets.debts(now)) rows.push({ budget, key, amount });
      }
      return rows;
    },
    join(others, now) {
      for (const { budget, key, amount } of others.debts) {
        if (!key.endsWith("|*")) shared.get(budget)?.join(key, amount, now);
      }
      for (const buckets of shared.values()) buckets.share(others.processes);
    },
    holdUntil(joined) {
      hold = joined.finally(() => hold = null);
    },
    requestOf: (destination, options) =>
      outboundRequestOf(destination, { ...options, platformHost }),
    async take(request, now) {
      if (hold !== null) await hold.catch(() => {/* joined or not, it spends */});
      const { orgId, host, bytes, relayRecipients } = request;
      const hostKey = `${orgId}|${hostDigest(host)}`;
      const shares: [TokenBuckets, string, number, string][] = [
        [orgRequests, orgId, 1, "the organization's outbound request limit"],
        [orgBytes, orgId, bytes, "the organization's outbound byte limit"],
        [hostRequests, hostKey, 1, `the organization's request limit for "${host}"`],
        [hostBytes, hostKey, bytes, `the organization's byte limit for "${host}"`],
      ];
      if (relayRecipients > 0) {
        shares.push([relayMinute, orgId, relayRecipients, "the platform relay's limit per minute"]);
      }
      const refusing = shares.filter(([buckets, key, amount]) =>
        buckets.waitMs(key, amount, now) > 0
      );
      if (refusing.length > 0) {
        // A turn of its own in each budget refusing it, so deferred jobs come back spread
        // out at the budget's rate rather than all together to be deferred again.
        let waitMs = 0;
        let reason = "";
        for (const [buckets, key, amount, what] of refusing) {
          const turn = buckets.turnMs(key, amount, now);
          if (turn > waitMs) [waitMs, reason] = [turn, what];
        }
        return { ok: false, retryAt: now + waitMs, reason: `${reason} is reached` };
      }
      // Taken before the day's count is read, so concurrent requests cannot all pass here.
      for (const [buckets, key, amount] of shares) buckets.take(key, amount, now);
      if (relayRecipients > 0 && perDay > 0) {
        const used = await relayUsage(db, orgId, now);
        // An empty day lends, as the buckets do: a message larger than the cap still goes.
        if (used > 0 && used + relayRecipients > perDay) {
          for (const [buckets, key, amount] of shares) buckets.giveBack(key, amount, now);
          return {
            ok: false,
            retryAt: nextUtcDay(now),
            reason: "the platform relay's daily limit is reached",
          };
        }
        await addRelayUsage(db, orgId, { recipients: relayRecipients, now });
      }
      return { ok: true };
    },
  };
}

/**
 * The budget's view of a request to a destination: its host (the platform relay's for
 * SMTP Variant B, with its recipients counted) and its size.
 */
export function outboundRequestOf(
  destination: { type: string; config: unknown },
  options: { orgId: string; bytes: number; platformHost: string | null },
): OutboundRequest {
  const target = describeTarget(destination.type, destination.config);
  const request = { orgId: options.orgId, bytes: options.bytes, relayRecipients: 0 };
  if (target === null) return { ...request, host: "?" };
  if ("url" in target) return { ...request, host: hostOf(target.url) };
  if (target.relay !== "platform") return { ...request, host: target.relay };
  return {
    ...request,
    host: options.platformHost ?? "platform",
    relayRecipients: Math.max(1, target.to.length),
  };
}

function hostOf(origin: string): string {
  try {
    return new URL(origin).host;
  } catch {
    return "?";
  }
}
