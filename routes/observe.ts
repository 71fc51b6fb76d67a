/**
 * What operators ask of a running process: `GET /healthz` (the cheap liveness check: the
 * KV answers a read), `GET /metrics` (Prometheus text format, behind a bearer token when
 * METRICS_TOKEN is set) and `GET /readyz` (whether this process can accept and deliver;
 * its KV write is made at most once a second, and its backlog read at most every five,
 * however many ask).
 *
 * @module
 */
import { timingSafeEqual } from "node:crypto";
import { Hono } from "hono";
import { describeError } from "../log.ts";
import { registry } from "../metrics.ts";
import { pingKv, probeKvWrite } from "../store/db.ts";
import type { AppDeps } from "./app_deps.ts";
import { ApiError, errorBody, ERRORS } from "../errors.ts";
import { ok, type OperationSpec } from "./operation_spec.ts";
import { z } from "zod";

/** SHA-256 of a text, for comparing tokens in constant time whatever their lengths. */
async function digest(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

/** One readiness check's answer: null when it passed, else what failed. */
type Check = Promise<string | null>;

/**
 * How long the KV write check's answer stands. `/readyz` needs no credentials; checked
 * on every request, a flood of probes was a flood of KV writes competing with
 * submissions' commits. Cached, a flood costs one write a second.
 */
export const READY_KV_CACHE_MS = 1000;

/**
 * `check` run at most once at a time, its answer kept for `ttlMs` after it settles:
 * callers meanwhile share the run under way or the kept answer.
 */
export function cachedCheck(
  check: () => Check,
  ttlMs: number,
  now: () => number = performance.now.bind(performance),
): () => Check {
  let last: { answer: Check; settledAt: number | null } | null = null;
  return () => {
    if (last !== null && (last.settledAt === null || now() - last.settledAt < ttlMs)) {
      return last.answer;
    }
    const run = { answer: check(), settledAt: null as number | null };
    run.answer.finally(() => run.settledAt = now()).catch(() => {});
    last = run;
    return run.answer;
  };
}

/** `GET /healthz`, `GET /metrics` and `GET /readyz`. */
export function observeRoutes(deps: AppDeps) {
  const { config, db, logger } = deps;
  const { backlog, delivering } = deps;
  const token = config.metrics.token === null ? null : digest(config.metrics.token);
  const router = new Hono();

  router.get("/healthz", async (c) => {
    try {
      await pingKv(db);
      return c.json({ ok: true });
    } catch (error) {
      logger.error("health check failed", { error: describeError(error) });
      return c.json(errorBody(ERRORS.kvNotAnswering.text), ERRORS.kvNotAnswering.status);
    }
  });

  router.get("/metrics", async (c) => {
    if (token !== null) {
      const given = /^Bearer (.+)$/i.exec(c.req.header("authorization") ?? "")?.[1];
      if (given === undefined || !timingSafeEqual(await digest(given), await token)) {
        c.header("WWW-Authenticate", 'Bearer realm="metrics"');
        throw new ApiError(ERRORS.invalidMetricsToken);
      }
    }
    c.header("Content-Type", registry.contentType);
    return c.body(await registry.metrics());
  });

  /** Each readiness check by name; they run together. */
  const checks: Record<string, () => Check> = {
    kv: cachedCheck(async () => {
      try {
        await probeKvWrite(db);
        return null;
      } catch (error) {
        logger.error("readiness: KV write failed", { error: describeError(error) });
        return "KV is not writable";
      }
    }, READY_KV_CACHE_MS),
    delivery: () => Promise.resolve(delivering() ? null : "Delivery engine is not running"),
    async backlog() {
      try {
        const { jobs } = await backlog.read();
        return jobs.due < config.readyMaxBacklog
          ? null
          : `${jobs.due} jobs due: at or over READY_MAX_BACKLOG (${config.readyMaxBacklog})`;
      } catch (error) {
        logger.error("readiness: backlog read failed", { error: describeError(error) });
        return "Backlog could not be read";
      }
    },
  };

  router.get("/readyz", async (c) => {
    const names = Object.keys(checks);
    const results = await Promise.all(names.map((name) => checks[name]()));
    const failed = Object.fromEntries(
      names.flatMap((name, i) => results[i] === null ? [] : [[name, results[i]]]),
    );
    const ready = Object.keys(failed).length === 0;
    return ready
      ? c.json({ ok: true, checks: Object.fromEntries(names.map((name) => [name, "ok"])) })
      : c.json(errorBody(ERRORS.notReady.text, { checks: failed }), ERRORS.notReady.status);
  });

  return router;
}

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const observeOperations: OperationSpec[] = [
  {
    method: "get",
    path: "/healthz",
    summary: "Health: answers 200 while the KV store answers",
    tag: "Service",
    answers: { 200: { description: "Healthy", schema: z.strictObject({ ok }) } },
    errors: [ERRORS.kvNotAnswering],
  },
  {
    method: "get",
    path: "/readyz",
    summary: "Readiness: the KV takes a write, the delivery engine runs, the backlog is under " +
      "READY_MAX_BACKLOG; a 503 names each failed check in `checks`",
    tag: "Service",
    answers: {
      200: {
        description: "Ready",
        schema: z.strictObject({ ok, checks: z.record(z.string(), z.literal("ok")) }),
      },
    },
    errors: [ERRORS.notReady],
  },
  {
    method: "get",
    path: "/metrics",
    summary: "Prometheus metrics (text format); a bearer token when METRICS_TOKEN is set",
    tag: "Service",
    answers: { 200: { description: "Prometheus text format 0.0.4", contentType: "text/plain" } },
    errors: [ERRORS.invalidMetricsToken],
  },
];
