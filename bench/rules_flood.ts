/**
 * bench:rules-flood — what the costliest submissions one organization's spam rules
 * allow do to another organization. One service process; organization A's form has 100
 * blocked words and 20 blocked patterns of the costliest accepted shape; organization B's
 * form has no rules. B posts small submissions at a steady pace, first alone, then while
 * POSTERS clients post 121 KB bodies of 1 000-character values to A as fast as they are
 * answered, each from an address of its own, each caught by the last pattern on its last value (BENCH_FLOOD=accepted: none
 * caught, all stored and delivered; BENCH_RULES=none or words: fewer rules, for scale). Prints B's p50/p99 in both phases and A's rate. Bounded: two phases of
 * PHASE_SECONDS, then it stops.
 *
 *     deno task bench:rules-flood
 */
import { percentile } from "../tests/reliability/helpers/cluster.ts";
import { startWebhookSink } from "../tests/helpers/sink.ts";
import { adminClient } from "../tools/admin_client.ts";
import { startBenchService } from "./lib.ts";

const POSTERS = Number(Deno.env.get("BENCH_POSTERS") ?? "8");
const PHASE_SECONDS = Number(Deno.env.get("BENCH_SECONDS") ?? "10");
/** B's pace: one submission every this many ms. */
const OTHER_EVERY_MS = 20;

const sink = startWebhookSink();
// Each poster from an address of its own (behind a trusted proxy header), as a flood from
// many addresses: one address's posters would meet the door's per-address body budget.
const service = await startBenchService(sink.url, { CLIENT_IP_HEADER: "x-forwarded-for" }, {
  otherTenant: "/other",
  destinations: 1,
});
try {
  const admin = adminClient(() => service.origin, service.tenantKey);
  // The costliest accepted shape: 21 alternations (of the 22 the issue found freezing) and a
  // distinct tail, so no two are one pattern; and 100 blocked words that never match.
  const rules = {
    blockedWords: Array.from({ length: 100 }, (_, i) => `blockedword${i}`),
    blockedPatterns: Array.from({ length: 20 }, (_, i) => "(a|a|a|a)".repeat(21) + `!${i}#`),
  };
  // BENCH_RULES=none: the same flood on a form without rules, for scale.
  if (Deno.env.get("BENCH_RULES") === "words") {
    delete (rules as Partial<typeof rules>).blockedPatterns;
  }
  if (Deno.env.get("BENCH_RULES") !== "none") {
    const patched = await admin("PATCH", `/forms/${service.formId}`, { spamRules: rules });
    if (patched.status !== 200) throw new Error(`spam rules: ${patched.text}`);
  }
  // Every value runs every pattern: by default the last value is caught by the last pattern
  // (all the rules' work, nothing kept); BENCH_FLOOD=accepted: nothing caught, all stored
  // and delivered.
  const accepted = Deno.env.get("BENCH_FLOOD") === "accepted";
  const costly = JSON.stringify(
    Object.fromEntries(
      Array.from({ length: 121 }, (_, i) => [
        `f${i}`,
        i === 120 && !accepted ? "a".repeat(996) + "!19#" : "a".repeat(999) + "?",
      ]),
    ),
  );
  console.log(
    `bench:rules-flood  ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ` +
      `${new Date().toISOString().slice(0, 10)}; A: ${POSTERS} posters of ${
        (costly.length / 1024).toFixed(0)
      } KB, B: one post every ${OTHER_EVERY_MS} ms`,
  );

  /** Posts to B at its pace for the phase; its latencies in ms and non-202 count. */
  const otherPhase = async (): Promise<{ latencies: number[]; failed: number }> => {
    const latencies: number[] = [];
    let failed = 0;
    const end = performance.now() + PHASE_SECONDS * 1000;
    const posts: Promise<void>[] = [];
    while (performance.now() < end) {
      posts.push((async () => {
        const start = performance.now();
        const response = await fetch(`${service.origin}/v1/f/${service.other!.publicKey}`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-forwarded-for": "203.0.113.1" },
          body: JSON.stringify({ name: "Ada", message: "Hello" }),
        });
        await response.body?.cancel();
        if (response.status !== 202) failed++;
        latencies.push(performance.now() - start);
      })());
      // The pace of B's visitors (load generation, not synchronisation).
      await new Promise((resolve) => setTimeout(resolve, OTHER_EVERY_MS));
    }
    await Promise.all(posts);
    return { latencies, failed };
  };

  const report = (name: string, { latencies, failed }: { latencies: number[]; failed: number }) => {
    console.log(
      `${name}: B ${latencies.length} posts, p50 ${percentile(latencies, 50).toFixed(1)} ms, ` +
        `p99 ${percentile(latencies, 99).toFixed(1)} ms, max ${
          Math.max(...latencies).toFixed(1)
        } ms, ${failed} not 202`,
    );
  };

  report("B alone      ", await otherPhase());

  let flooding = true;
  let floodPosts = 0;
  const floodStatuses = new Map<number, number>();
  const flood = Array.from({ length: POSTERS }, async (_, poster) => {
    while (flooding) {
      const response = await fetch(`${service.origin}/v1/f/${service.publicKey}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-forwarded-for": `198.51.100.${poster}` },
        body: costly,
      });
      await response.body?.cancel();
      floodPosts++;
      floodStatuses.set(response.status, (floodStatuses.get(response.status) ?? 0) + 1);
    }
  });
  const start = performance.now();
  const during = await otherPhase();
  flooding = false;
  await Promise.all(flood);
  report("B during flood", during);
  console.log(
    `A: ${floodPosts} costly posts answered, ${
      (floodPosts / ((performance.now() - start) / 1000)).toFixed(1)
    } a second (${[...floodStatuses].map(([status, n]) => `${n} × ${status}`).join(", ")})`,
  );
} finally {
  await service.stop();
  await sink.close();
}
