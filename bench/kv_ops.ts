/**
 * bench:kv-ops — what a delivered submission costs in KV operations, with one, three and
 * ten webhook destinations, run as on Deno Deploy: no KV queues (KV_QUEUES=false), the
 * sweep once a minute. The service runs in this process on a fresh KV file whose handle
 * counts every operation: keys read (a get, each key of a getMany, each entry a listing
 * returns, and each listing), commits, and the mutations, checks and enqueues in them.
 * BENCH_SUBMISSIONS (default 300) one-off visitors each post once, 10 at a time; the
 * count runs from the first post until every delivery has arrived and every job has
 * ended, and is printed per submission. The defaults otherwise (rate limit and
 * outbound budgets on). With BENCH_POSTS_PER_CLIENT=2 each address posts twice: every
 * visitor a repeat one.
 */
import { adminClient, createFormWith } from "../tools/admin_client.ts";

const N = Number(Deno.env.get("BENCH_SUBMISSIONS") ?? "300");
const DESTINATIONS = [1, 3, 10];
const POSTS_PER_CLIENT = Number(Deno.env.get("BENCH_POSTS_PER_CLIENT") ?? "1");

/** KV operations counted. */
const count = { keysRead: 0, listings: 0, commits: 0, mutations: 0, checks: 0, enqueues: 0 };
function resetCount() {
  for (const key of Object.keys(count) as (keyof typeof count)[]) count[key] = 0;
}

/** An atomic operation whose checks, mutations and enqueues are counted when it commits. */
function countingAtomic(op: Deno.AtomicOperation): Deno.AtomicOperation {
  const pending = { mutations: 0, checks: 0, enqueues: 0 };
  const proxy: Deno.AtomicOperation = new Proxy(op, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        if (prop === "commit") {
          count.commits++;
          count.mutations += pending.mutations;
          count.checks += pending.checks;
          count.enqueues += pending.enqueues;
          return value.apply(target, args);
        }
        if (prop === "check") pending.checks += args.length;
        else if (prop === "enqueue") pending.enqueues++;
        else pending.mutations++;
        value.apply(target, args);
        return proxy;
      };
    },
  });
  return proxy;
}

/** A KV handle that counts what is asked of it. */
function countingKv(kv: Deno.Kv): Deno.Kv {
  return new Proxy(kv, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (typeof value !== "function") return value;
      switch (prop) {
        case "get":
          return (...args: unknown[]) => (count.keysRead++, value.apply(target, args));
        case "getMany":
          return (keys: unknown[], ...rest: unknown[]) => {
            count.keysRead += keys.length;
            return value.apply(target, [keys, ...rest]);
          };
        case "list":
          return (...args: unknown[]) => {
            count.listings++;
            const iterator = value.apply(target, args) as Deno.KvListIterator<unknown>;
            return (async function* () {
              for await (const entry of iterator) {
                count.keysRead++;
                yield entry;
              }
            })();
          };
        case "atomic":
          return () => countingAtomic(value.apply(target, []));
        case "set":
        case "delete":
          return (...args: unknown[]) => {
            count.commits++;
            count.mutations++;
            return value.apply(target, args);
          };
        case "enqueue":
          return (...args: unknown[]) => {
            count.commits++;
            count.enqueues++;
            return value.apply(target, args);
          };
        default:
          return value.bind(target);
      }
    },
  });
}

const openKv = Deno.openKv;
// The service opens its KV through Deno.openKv (store/db.ts): hand it the counting handle.
Object.defineProperty(Deno, "openKv", {
  value: async (path?: string) => countingKv(await openKv(path)),
});

let arrivals = 0;
const sink = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
  await request.arrayBuffer();
  arrivals++;
  return new Response("ok");
});
const sinkUrl = `http://127.0.0.1:${sink.addr.port}`;

const { loadConfig } = await import("../config.ts");
const { startService } = await import("../service.ts");
const { createOrg } = await import("../store/orgs.ts");
const { jobsPrefix } = await import("../store/keys.ts");

async function run(destinations: number) {
  const dir = await Deno.makeTempDir({ prefix: "formrelay-bench-" });
  const config = loadConfig({
    KV_PATH: `${dir}/formrelay.kv`,
    ALLOW_PRIVATE_DESTINATIONS: "true",
    KV_QUEUES: "false",
    SWEEP_INTERVAL_SECONDS: "60",
    CLIENT_IP_HEADER: "x-forwarded-for",
    LOG_LEVEL: "silent",
  });
  const service = await startService(config);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, service.app.fetch);
  const watch = await openKv(config.kvPath);
  try {
    const { tenantKey } = await createOrg(service.db, "Bench");
    const admin = adminClient(() => `http://127.0.0.1:${server.addr.port}`, tenantKey);
    const form = await createFormWith(
      admin,
      "KV operations",
      Array.from({ length: destinations }, (_, i) => ({
        type: "webhook",
        config: { url: `${sinkUrl}/${i}` },
      })),
    );
    arrivals = 0;
    resetCount();
    let next = 0;
    await Promise.all(Array.from({ length: 10 }, async () => {
      while (next < N) {
        const i = Math.floor(next++ / POSTS_PER_CLIENT);
        const response = await fetch(
          `http://127.0.0.1:${server.addr.port}/v1/f/${form.publicKey}`,
          {
            method: "POST",
            headers: {
              "content-type": "application/json",
              "x-forwarded-for": `198.51.${i >> 8}.${i & 255}`,
            },
            body: JSON.stringify({ name: "Ada", email: "ada@example.org", message: "Hello" }),
          },
        );
        await response.body?.cancel();
        if (response.status !== 202) throw new Error(`submission answered ${response.status}`);
      }
    }));
    const deadline = Date.now() + 120_000;
    const jobsLeft = async () =>
      (await Array.fromAsync(watch.list({ prefix: jobsPrefix() }, { limit: 1 }))).length;
    while ((arrivals < N * destinations || await jobsLeft() > 0) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const per = (n: number) => (n / N).toFixed(1);
    console.log(
      `${String(destinations).padStart(2)} destination(s): per submission ${per(count.keysRead)} ` +
        `keys read in ${per(count.listings)} listings and gets; ${per(count.commits)} commits ` +
        `with ${per(count.mutations)} mutations, ${per(count.checks)} checks, ` +
        `${per(count.enqueues)} enqueues (${arrivals} of ${N * destinations} delivered)`,
    );
  } finally {
    watch.close();
    await server.shutdown();
    await service.close();
    await Deno.remove(dir, { recursive: true });
  }
}

console.log(
  `bench:kv-ops — ${N} submissions, ${POSTS_PER_CLIENT} per address, Deploy-like (no queues), ` +
    `${navigator.hardwareConcurrency} ` +
    `cores, Deno ${Deno.version.deno}, ${new Date().toISOString()}`,
);
for (const destinations of DESTINATIONS) await run(destinations);
await sink.shutdown();
