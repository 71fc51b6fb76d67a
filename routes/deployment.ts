/**
 * `GET /deployment`: what this deployment offers, so that clients (the console) offer
 * only what can work: the captcha provider tokens are verified with, whether the
 * platform email relay is configured, which submission bodies are taken, and each
 * destination type's editor (connectors/registry.ts).
 *
 * @module
 */
import { Hono } from "hono";
import { consoleDestinationTypes } from "../connectors/registry.ts";
import { captchaProviderOf } from "../ingest/captcha.ts";
import type { AdminEnv, AppDeps } from "./app_deps.ts";
import { refuseOtherMethods } from "./http.ts";

/** The answer of `GET /deployment` for a configuration. */
export function deploymentView(config: AppDeps["config"]) {
  return {
    captcha: captchaProviderOf(config.captchaVerifyUrl),
    platformRelay: config.platformSmtp !== null,
    ingestContentTypes: config.ingestContentTypes,
    privateDestinations: config.allowPrivateDestinations,
    /** Whether failed deliveries are kept for redelivery (FAILED_RETENTION_HOURS > 0). */
    retainsFailed: config.failedRetentionMs > 0,
    /** Each destination type's name, secret fields and editors: the console renders from them. */
    destinationTypes: consoleDestinationTypes(),
  };
}

/** `GET /deployment` (an admin route: the tenant's view of the deployment's settings). */
export function deploymentRoutes({ config }: AppDeps) {
  const router = new Hono<AdminEnv>();
  const view = deploymentView(config);
  router.get("/deployment", (c) => c.json({ ok: true, ...view }));
  refuseOtherMethods(router, "/deployment");
  return router;
}
