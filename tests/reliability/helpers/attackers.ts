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
  return holdBody(port, stop, counts, { path, localAddress, length: 131072, trickle: true });
}

/**
 * Keeps one connection posting a JSON body that never completes: the head declares
 * `length` bytes, one is sent, then one a second with `trickle` or none at all; reopened
 * whenever the server closes it (after its 408, say).
 */
export function holdBody(
  port: number,
  stop: AbortSignal,
  counts: { closed: number },
  options: { path: string; localAddress: string; length: number; trickle: boolean },
): Promise<void> {
  return hold(port, stop, counts, {
    localAddress: options.localAddress,
    send(socket) {
      socket.write(
        `POST ${options.path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
          `content-length: ${options.length}\r\n\r\n[`,
      );
      if (!options.trickle) return () => {};
      const trickle = setInterval(() => socket.write("1"), 1000);
      return () => clearInterval(trickle);
    },
  });
}

/** Slow bodies held from several addresses at once (the door's attacks). */
export interface AddressAttack {
  label: string;
  /** Source addresses: 127.0.0.2 and up. */
  addresses: number;
  /** Connections held per address. */
  connections: number;
  /** The Content-Length every body declares. */
  length: number;
  /** A byte a second after the first, instead of none. */
  trickle: boolean;
}

/** The attacks a visitor must get through, the first four on `HTTP_MAX_CONNECTIONS=200`. */
export const DOOR_ATTACKS: readonly AddressAttack[] = [
  {
    label: "2 × 33 declaring 128 KB",
    addresses: 2,
    connections: 33,
    length: 131072,
    trickle: false,
  },
  {
    label: "2 × 33 declaring 128 KB, trickling",
    addresses: 2,
    connections: 33,
    length: 131072,
    trickle: true,
  },
  { label: "49 × 5 declaring 20 B", addresses: 49, connections: 5, length: 20, trickle: false },
  {
    label: "49 × 5 declaring 20 B, trickling",
    addresses: 49,
    connections: 5,
    length: 20,
    trickle: true,
  },
  {
    label: "200 × 5 declaring 128 KB, trickling",
    addresses: 200,
    connections: 5,
    length: 131072,
    trickle: true,
  },
  { label: "200 × 5 declaring 20 B", addresses: 200, connections: 5, length: 20, trickle: false },
];

/** The i-th attacking address (0-based): 127.0.0.2 and up, never a visitor's 127.0.1.x. */
export function attackerAddress(i: number): string {
  return `127.0.${Math.floor((i + 2) / 256) * 2}.${(i + 2) % 256}`;
}

/** What visitors got during an attack. */
export interface VisitReport {
  sent: number;
  accepted: number;
  statuses: Record<string, number>;
  /** Milliseconds from sending to the answer, of every visit (failed ones included). */
  latencies: number[];
  /** Connections the server closed under the attackers. */
  attackersClosed: number;
}

/**
 * Holds `attack` against `url` (a form's ingestion URL) for `seconds`, while a visitor
 * posts a small JSON body every `everyMs` on a new connection, each from one of 250
 * addresses 127.0.1.x; every visit may take at most 10 s. Attackers stop at the end.
 */
export async function visitDuringAttack(
  url: string,
  attack: AddressAttack,
  options: { seconds: number; everyMs: number },
): Promise<VisitReport> {
  const { port, pathname } = new URL(url);
  const stop = new AbortController();
  const counts = { closed: 0 };
  const attackers: Promise<void>[] = [];
  for (let a = 0; a < attack.addresses; a++) {
    for (let n = 0; n < attack.connections; n++) {
      attackers.push(holdBody(Number(port), stop.signal, counts, {
        path: pathname,
        localAddress: attackerAddress(a),
        length: attack.length,
        trickle: attack.trickle,
      }));
    }
  }
  // The attack takes hold before the first visit.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const visitors = Array.from(
    { length: 250 },
    (_, i) => Deno.createHttpClient({ localAddress: `127.0.1.${i + 1}`, poolMaxIdlePerHost: 0 }),
  );
  const report: VisitReport = {
    sent: 0,
    accepted: 0,
    statuses: {},
    latencies: [],
    attackersClosed: 0,
  };
  const visits: Promise<void>[] = [];
  const end = Date.now() + options.seconds * 1000;
  for (let n = 0; Date.now() < end; n++) {
    report.sent++;
    visits.push((async () => {
      const started = performance.now();
      let status: string;
      try {
        const response = await fetch(url, {
          client: visitors[n % visitors.length],
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ name: "Ada", message: `visit ${n}` }),
          signal: AbortSignal.timeout(10_000),
        });
        await response.body?.cancel();
        status = String(response.status);
      } catch {
        status = "error";
      }
      report.latencies.push(performance.now() - started);
      report.statuses[status] = (report.statuses[status] ?? 0) + 1;
      if (status === "202") report.accepted++;
    })());
    await new Promise((resolve) => setTimeout(resolve, options.everyMs));
  }
  await Promise.all(visits);
  report.attackersClosed = counts.closed;
  stop.abort();
  await Promise.all(attackers);
  visitors.forEach((client) => client.close());
  return report;
}
