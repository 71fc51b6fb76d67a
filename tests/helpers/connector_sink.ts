/**
 * Test helpers for the HTTP connectors: a real local sink on 127.0.0.1 that
 * records every request, and a delivery request builder.
 *
 * @module
 */
import type { SubmissionEnvelope } from "../../store/envelope.ts";
import { freePort } from "../../tools/ports.ts";
import assert from "node:assert/strict";
import type { HttpConnectorDeps } from "../../connectors/http.ts";
import { createHttpTransport } from "../../connectors/http_transport.ts";
import type { OutboundGuard } from "../../connectors/outbound_guard.ts";
import { DeliveryError, type DeliveryRequest } from "../../connectors/types.ts";

/** One request as the sink received it. */
export interface ReceivedRequest {
  method: string;
  url: URL;
  headers: Headers;
  body: string;
}

/** A running sink; `await using` closes it and releases handlers still waiting. */
export interface Sink extends AsyncDisposable {
  /** `http://127.0.0.1:<port>` */
  origin: string;
  requests: ReceivedRequest[];
  /**
   * Resolves when the sink closes (or after 10 s, so a broken time-out fails a test
   * instead of hanging it); a handler awaiting it does not answer in time.
   */
  released: Promise<void>;
}

/** Starts a sink answering with `answer` after recording the request. */
export function startSink(
  answer: (request: ReceivedRequest, sink: Sink) => Response | Promise<Response>,
): Sink {
  const controller = new AbortController();
  const release = Promise.withResolvers<void>();
  const requests: ReceivedRequest[] = [];
  const backstop = setTimeout(release.resolve, 10_000);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen() {} },
    async (request) => {
      const received = {
        method: request.method,
        url: new URL(request.url),
        headers: request.headers,
        body: await request.text(),
      };
      requests.push(received);
      return await answer(received, sink);
    },
  );
  const sink: Sink = {
    origin: `http://127.0.0.1:${server.addr.port}`,
    requests,
    released: release.promise,
    async [Symbol.asyncDispose]() {
      clearTimeout(backstop);
      release.resolve();
      controller.abort();
      await server.finished;
    },
  };
  return sink;
}

/** Waits for `promise`, failing after `ms` milliseconds. */
export async function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Timed out waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** A port on 127.0.0.1 nothing listens on. */
export const closedPort = freePort;

/** A guard that lets every host through, for tests against the local sink. */
export const allowAllHosts: OutboundGuard = {
  allowAll: true,
  approve: (hostname) => Promise.resolve([hostname]),
};

/**
 * A guard approving every name at 127.0.0.1 and recording each look-up: on the pinned
 * path that is one per new connection. Stands in for a public host served on loopback.
 */
export function loopbackGuard(): { guard: OutboundGuard; approved: string[] } {
  const approved: string[] = [];
  const guard: OutboundGuard = {
    allowAll: false,
    approve(hostname) {
      approved.push(hostname);
      return Promise.resolve(["127.0.0.1"]);
    },
  };
  return { guard, approved };
}

/** HTTP connector deps: the attempt time-out and a transport over `guard` (every host allowed). */
export function httpDeps(
  timeoutMs: number,
  guard: OutboundGuard = allowAllHosts,
): HttpConnectorDeps {
  return { timeoutMs, transport: createHttpTransport(guard) };
}

/** A sample envelope. */
export const ENVELOPE: SubmissionEnvelope = {
  submissionId: "6f1c1c1e-8d8a-4c57-9a3e-2d1d2b1f0a01",
  formId: "form-1",
  formName: "Contact",
  payload: { name: "Ada", email: "ada@example.com", topics: ["a", "b"] },
  metadata: {
    origin: "https://site.example",
    ip: "203.0.113.7",
    userAgent: "Mozilla/5.0",
    referer: "https://site.example/contact",
    submittedAt: "2025-01-02T03:04:05.000Z",
  },
};

/** A delivery request for `config`, with a fresh signal unless one is given. */
export function deliveryRequest<C>(
  config: C,
  options: { deliveryId?: string; signal?: AbortSignal } = {},
): DeliveryRequest<C> {
  return {
    envelope: ENVELOPE,
    config,
    deliveryId: options.deliveryId ?? "dlv_0123456789abcdef",
    destinationId: "dest-1",
    signal: options.signal ?? new AbortController().signal,
  };
}

/** Runs `fn`, which must throw a DeliveryError, and returns it. */
export async function deliveryFailure(fn: () => Promise<unknown>): Promise<DeliveryError> {
  try {
    await fn();
  } catch (error) {
    assert.ok(error instanceof DeliveryError, `Expected a DeliveryError, got ${error}`);
    return error;
  }
  throw new assert.AssertionError({ message: "Expected a DeliveryError, got success" });
}
