import { notificationRoutes } from "./routes/notifications.ts";
import { notifyConfirmRoutes } from "./routes/notify_confirm.ts";
import { type Env, Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { consoleRoutes } from "./console/serve.ts";
import { describeError } from "./log.ts";
import { tenantAuth } from "./routes/auth.ts";
import { deliveryRoutes } from "./routes/deliveries.ts";
import { deploymentRoutes } from "./routes/deployment.ts";
import { refusalRoutes } from "./routes/refusals.ts";
import { destinationPreviewRoutes } from "./routes/destination_preview.ts";
import { destinationRoutes } from "./routes/destinations.ts";
import type { AdminEnv, AppDeps } from "./routes/app_deps.ts";
import { bodyTimingOf } from "./body_reading.ts";
import { formRoutes } from "./routes/forms.ts";
import {
  createIngestion,
  type IngestConnection,
  type LogIds,
  type SubmissionIds,
  submissionPathKey,
} from "./routes/ingest.ts";
import { pageTokenRoutes } from "./routes/page_token.ts";
import { ApiError, errorBody, ERRORS } from "./errors.ts";
import { keyRoutes } from "./routes/keys.ts";
import { organizationOperationLimit } from "./routes/limits.ts";
import { openApiRoutes } from "./routes/openapi.ts";
import { observeRoutes } from "./routes/observe.ts";
import { testSendRoutes } from "./routes/test_send.ts";

/** Admin paths limited by ADMIN_OPERATIONS_PER_ORG: each change there touches delivery jobs. */
const LIMITED_OPERATIONS = [
  "/forms/:id/destinations/:destId",
  "/forms/:id/destinations/:destId/resume",
  "/forms/:id/destinations/:destId/redeliver",
  "/forms/:id/destinations/:destId/send-now",
  "/forms/:id/deliveries/:deliveryId/redeliver",
];

/** A request path as logged: long ones cut, so a hostile URL cannot flood the log. */
function loggedPath(path: string): string {
  return path.length > 200 ? path.slice(0, 200) + "…" : path;
}

/** Each application's admin API, which answers the requests it is handed. */
const adminApps = new WeakMap<Hono, Hono<AdminEnv>>();

/** Every method and path an application created here serves, its admin API's included. */
export function servedRoutes(app: Hono): { method: string; path: string }[] {
  const admin = adminApps.get(app)?.routes ?? [];
  return [...app.routes.filter((route) => route.path !== "/v1/admin/*"), ...admin];
}

/** The path of a URL, without its query (as Hono's `c.req.path`). */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("://") + 3);
  if (start === -1) return "/";
  const end = url.search(/[?#]/);
  return url.slice(start, end === -1 ? undefined : end);
}

/**
 * Logs the line of an answered request. A request to a form carries whose it is
 * (routes/ingest.ts), not only its pk_ path; an accepted submission's line is its
 * `submission accepted` line, one per submission.
 */
function logRequest(
  logger: AppDeps["logger"],
  request: { method: string; path: string; status: number; started: number },
  logIds: LogIds | undefined,
): void {
  const { accepted, ...ids } = logIds ?? {};
  logger.info(accepted === undefined ? "request" : "submission accepted", {
    method: request.method,
    path: loggedPath(request.path),
    ...ids,
    ...accepted,
    status: request.status,
    ms: Math.round((performance.now() - request.started) * 10) / 10,
  });
}

/**
 * The HTTP application: health, admin API, ingestion, the API description and the
 * console, with one error handler.
 */
export function createApp(deps: AppDeps): Hono {
  const { db, logger } = deps;
  const app = new Hono();

  app.use(async (c, next) => {
    const started = performance.now();
    await next();
    const { method, path } = c.req;
    const logIds = (c.var as { logIds?: LogIds }).logIds;
    logRequest(logger, { method, path, status: c.res.status, started }, logIds);
  });

  app.route("/", observeRoutes(deps));

  // The admin API is an application of its own, handed its requests whole: its paths
  // (`…/destinations/preview` beside `…/destinations/:destId`) need Hono's slower trie
  // router, which would otherwise match every public request too.
  const admin = new Hono<AdminEnv>().basePath("/v1/admin");
  admin.use(tenantAuth(db, deps.now ?? Date.now));
  const bodyTiming = bodyTimingOf(deps.config);
  admin.use(async (c, next) => {
    c.set("bodyTiming", bodyTiming);
    await next();
  });
  // Operations that touch delivery jobs are limited per organization (routes/limits.ts).
  const operations = organizationOperationLimit(deps.config.adminOperationsPerOrg);
  for (const path of LIMITED_OPERATIONS) admin.use(path, operations);
  admin.route("/", keyRoutes(deps));
  admin.route("/", formRoutes(deps));
  // Before the destination routes, whose "/forms/:id/destinations/:destId" would take it.
  admin.route("/", destinationPreviewRoutes(deps));
  admin.route("/", destinationRoutes(deps));
  admin.route("/", testSendRoutes(deps));
  admin.route("/", deliveryRoutes(deps));
  admin.route("/", deploymentRoutes(deps));
  admin.route("/", refusalRoutes(deps));
  admin.route("/", notificationRoutes(deps));
  answerErrors(admin, logger);
  app.all("/v1/admin/*", (c) => admin.fetch(c.req.raw, c.env));
  adminApps.set(app, admin);
  app.route("/v1/f", pageTokenRoutes(deps.db));
  app.route("/", notifyConfirmRoutes(deps));
  const ingestion = createIngestion(deps);
  app.route("/v1/f", ingestion.routes);
  app.route("/", openApiRoutes(deps.config));
  app.route("/", consoleRoutes());

  answerErrors(app, logger);

  // A post to a form, the service's busiest request, is answered without the router: its
  // dispatch and context cost about 5 % of a submission's CPU (docs/design.md).
  // Set on the app itself, so that app.request (the tests) takes the same way in.
  const route = app.fetch;
  app.fetch = (request, env, executionCtx) => {
    const publicKey = request.method === "POST" ? submissionPathKey(request.url) : null;
    if (publicKey === null) return route(request, env, executionCtx);
    return submitDirectly(request, env, publicKey);
  };
  async function submitDirectly(request: Request, info: unknown, publicKey: string) {
    const started = performance.now();
    const ids: SubmissionIds = {};
    const response = await ingestion.submit(request, info as IngestConnection, publicKey, ids);
    const line = { method: "POST", path: pathOf(request.url), status: response.status, started };
    logRequest(logger, line, ids.logIds);
    return response;
  }
  return app;
}

/** Answers unknown paths and errors with the contract's JSON bodies; logs the unexpected. */
function answerErrors<E extends Env>(app: Hono<E>, logger: AppDeps["logger"]): void {
  app.notFound((c) => c.json(errorBody(ERRORS.notFound.text), ERRORS.notFound.status));
  app.onError((error, c) => {
    if (error instanceof ApiError) {
      return c.json(errorBody(error.message, error.details), error.status);
    }
    if (error instanceof HTTPException) {
      return c.json(errorBody(error.message || "Bad request"), error.status);
    }
    logger.error("unhandled error", {
      method: c.req.method,
      path: loggedPath(c.req.path),
      error: describeError(error),
    });
    return c.json(errorBody(ERRORS.internal.text), ERRORS.internal.status);
  });
}
