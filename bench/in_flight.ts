/**
 * bench:in-flight — what one delivery request in flight costs: memory and descriptors.
 * A child process runs a loopback receiver that reads each request and never answers;
 * this process then sends BENCH_REQUESTS (2 000) requests of about 1 KB with `fetch`,
 * as deliveries do, waits 3 s, and prints the RSS and descriptors they added, per
 * request. What DELIVERY_CONCURRENCY's default is sized from.
 */
import { freePort, spawnDeno, waitUntilUp } from "./lib.ts";

if (Deno.args[0] === "receiver") {
  const hold = Promise.withResolvers<void>();
  Deno.serve({ hostname: "127.0.0.1", port: Number(Deno.args[1]), onListen() {} }, async (r) => {
    await r.arrayBuffer();
    if (new URL(r.url).pathname === "/up") return new Response("up");
    await hold.promise;
    return new Response("ok");
  });
} else {
  const count = Number(Deno.env.get("BENCH_REQUESTS") ?? "2000");
  const port = freePort();
  const receiver = spawnDeno([new URL(import.meta.url).pathname, "receiver", String(port)], {});
  await waitUntilUp(`http://127.0.0.1:${port}/up`);
  const descriptors = () => [...Deno.readDirSync("/proc/self/fd")].length;
  const rss = () =>
    Number(/VmRSS:\s+(\d+)/.exec(Deno.readTextFileSync("/proc/self/status"))![1]) / 1024;
  const body = JSON.stringify({ payload: { name: "Ada", message: "x".repeat(700) } });
  const settle = () => new Promise((resolve) => setTimeout(resolve, 3000));
  await settle();
  const before = { fds: descriptors(), rss: rss() };
  const stop = new AbortController();
  const requests = Array.from({ length: count }, () =>
    fetch(`http://127.0.0.1:${port}/hold`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
      signal: stop.signal,
    }).catch(() => null));
  await settle();
  const after = { fds: descriptors(), rss: rss() };
  console.log(
    `${count} requests in flight: RSS ${before.rss.toFixed(0)} → ${after.rss.toFixed(0)} MB ` +
      `(${((after.rss - before.rss) * 1024 / count).toFixed(1)} KB each), descriptors ` +
      `${before.fds} → ${after.fds} (${((after.fds - before.fds) / count).toFixed(2)} each); ` +
      `Deno ${Deno.version.deno}`,
  );
  stop.abort();
  await Promise.all(requests);
  receiver.kill();
  await receiver.status;
}
