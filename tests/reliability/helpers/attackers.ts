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

/**
 * Keeps one connection from `localAddress` open, opening a new one whenever the server
 * closes it: idle (`send` unset), or sending what `send` writes once connected.
 */
function hold(
  port: number,
  stop: AbortSignal,
  counts: { closed: number },
  options: { localAddress: string; send?: (socket: net.Socket) => () => void },
): Promise<void> {
  return new Promise((resolve) => {
    const open = () => {
      if (stop.aborted) return resolve();
      const socket = net.connect({ port, host: "127.0.0.1", localAddress: options.localAddress });
      let stopSending = () => {};
      const onStop = () => socket.destroy();
      stop.addEventListener("abort", onStop, { once: true });
      socket.on("connect", () => {
        if (options.send) stopSending = options.send(socket);
      });
      socket.on("data", () => {});
      socket.on("error", () => {});
      socket.on("close", () => {
        stopSending();
        stop.removeEventListener("abort", onStop);
        if (!stop.aborted) counts.closed++;
        setTimeout(open, 20);
      });
    };
    open();
  });
}

/** Keeps one idle connection open (from 127.0.0.3 unless told otherwise). */
export function holdIdle(
  port: number,
  stop: AbortSignal,
  counts: { closed: number },
  localAddress = "127.0.0.3",
): Promise<void> {
  return hold(port, stop, counts, { localAddress });
}

/** Keeps one connection trickling a 128 KB body, a byte a second (from 127.0.0.2 by default). */
export function holdSlowBody(
  port: number,
  path: string,
  stop: AbortSignal,
  counts: { closed: number },
  localAddress = "127.0.0.2",
): Promise<void> {
  return hold(port, stop, counts, {
    localAddress,
    send(socket) {
      socket.write(
        `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
          `content-length: 131072\r\n\r\n[`,
      );
      const trickle = setInterval(() => socket.write("1"), 1000);
      return () => clearInterval(trickle);
    },
  });
}
