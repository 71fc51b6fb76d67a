/**
 * Structured JSON log lines. Callers pass ids, statuses and timings: never payloads or
 * secrets. As a last line of defence every string in a line has its URLs cut down to
 * `scheme://host[:port]` (redact.ts): a URL's path and query may hold a secret.
 */
import { redactUrls } from "./redact.ts";

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const;

/** A log level name. */
type LogLevel = keyof typeof LEVELS;

/** Writes one JSON object per line. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** How long a line may wait to go out with others: under load, one write carries hundreds. */
const FLUSH_MS = 20;
/** Lines held at most before they are written at once. */
const MAX_PENDING = 1000;

/**
 * Writes lines to stdout in batches: lines written within FLUSH_MS go out in one
 * write, not one syscall each (a line per request adds up under load). What is
 * pending goes out when the process exits through Deno.exit or ends normally.
 */
function bufferedStdout(): (line: string) => void {
  const encoder = new TextEncoder();
  let pending: string[] = [];
  let timer: ReturnType<typeof setTimeout> | null = null;
  function flush() {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    if (pending.length === 0) return;
    const bytes = encoder.encode(pending.join("\n") + "\n");
    pending = [];
    for (let offset = 0; offset < bytes.length;) {
      offset += Deno.stdout.writeSync(bytes.subarray(offset));
    }
  }
  globalThis.addEventListener("unload", flush);
  return (line) => {
    pending.push(line);
    if (pending.length >= MAX_PENDING) flush();
    else timer ??= setTimeout(flush, FLUSH_MS);
  };
}

/** A logger writing lines at or above `level` to `write` (buffered stdout by default). */
export function createLogger(
  level: LogLevel,
  write: (line: string) => void = bufferedStdout(),
): Logger {
  const threshold = LEVELS[level];
  const emit = (at: Exclude<LogLevel, "silent">) => (msg: string, fields = {}) => {
    if (LEVELS[at] < threshold) return;
    const line = { time: new Date().toISOString(), level: at, msg, ...fields };
    const text = JSON.stringify(line);
    // A replacer takes JSON.stringify off its fast path: only lines quoting a URL pay for it.
    write(text.includes("://") ? JSON.stringify(line, redactStrings) : text);
  };
  return { debug: emit("debug"), info: emit("info"), warn: emit("warn"), error: emit("error") };
}

function redactStrings(_key: string, value: unknown): unknown {
  return typeof value === "string" ? redactUrls(value) : value;
}

/**
 * The name and message of an error, without its stack (which may quote data), and with
 * any URL in it cut down to `scheme://host[:port]` (fetch errors quote the whole URL).
 */
export function describeError(error: unknown): string {
  return redactUrls(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
}
