/**
 * Hostile clients for the reliability suite and bench:hostile: connections held idle,
 * bodies trickled a byte a second, and the child's RSS watched from /proc. Each loop
 * reopens what the server closes and ends when its signal aborts.
 *
 * @module
 */
import net from "node:net";

/** The child's resident memory in MB, from /proc. */
export async function rssMb(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
}

/** Samples the child's RSS every 50 ms until stopped; returns the peak. */
export function watchRss(pid: number) {
  let peak = 0;
  let running = true;
  const done = (async () => {
    while (running) {
      peak = Math.max(peak, await rssMb(pid).catch(() => 0));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      return peak;
    },
  };
}

/** Keeps one idle connection open, opening a new one whenever the server closes it. */
export async function holdIdle(port: number, stop: AbortSignal, counts: { closed: number }) {
  while (!stop.aborted) {
    let conn: Deno.Conn;
    try {
      conn = await Deno.connect({ hostname: "127.0.0.1", port });
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 100));
      continue;
    }
    const onStop = () => conn.close();
    stop.addEventListener("abort", onStop, { once: true });
    await conn.read(new Uint8Array(1024)).catch(() => null);
    stop.removeEventListener("abort", onStop);
    if (!stop.aborted) {
      counts.closed++;
      try {
        conn.close();
      } catch { /* closed */ }
    }
  }
}

/** Keeps one connection trickling a 128 KB body (a byte a second) from another address. */
export function holdSlowBody(
  port: number,
  path: string,
  stop: AbortSignal,
  counts: { closed: number },
  localAddress = "127.0.0.2",
): Promise<void> {
  return new Promise((resolve) => {
    const open = () => {
      if (stop.aborted) return resolve();
      const socket = net.connect({ port, host: "127.0.0.1", localAddress });
      let trickle: ReturnType<typeof setInterval> | undefined;
      const onStop = () => socket.destroy();
      stop.addEventListener("abort", onStop, { once: true });
      socket.on("connect", () => {
        socket.write(
          `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
            `content-length: 131072\r\n\r\n[`,
        );
        trickle = setInterval(() => socket.write("1"), 1000);
      });
      socket.on("data", () => {});
      socket.on("error", () => {});
      socket.on("close", () => {
        clearInterval(trickle);
        stop.removeEventListener("abort", onStop);
        if (!stop.aborted) counts.closed++;
        setTimeout(open, 20);
      });
    };
    open();
  });
}
