/**
 * The page a notification address's confirmation link opens: `GET` shows what is asked
 * and one button, and changes nothing (mail scanners that fetch links confirm nothing);
 * the button posts the token back (`POST`), which confirms the address. The token is in
 * the query, never in a log line (requests are logged by path) or a Referer.
 *
 * @module
 */
import { type Context, Hono } from "hono";
import { CONFIRM_PATH } from "../notify/address_confirmation.ts";
import { escapeHtml, page } from "../ingest/pages.ts";
import { maskAddress } from "../rules/confirmation.ts";
import { addressOfToken, confirmByToken } from "../store/notify_confirmations.ts";
import type { AppDeps } from "./app_deps.ts";
import { refuseOtherMethods } from "./http.ts";
import type { OperationSpec } from "./operation_spec.ts";
import { z } from "zod";

/** Longest body the button posts (a token field). */
const MAX_BODY = 1024;

const GONE = page(
  "This link no longer works",
  "<p>It has expired (links work for 7 days), was replaced by a newer one, was already used, " +
    "or the address was removed. The organization's owner can send a new one from the console " +
    "of formrelay.</p>",
);

function html(c: Context, body: string, status: 200 | 400 | 404 | 413) {
  c.header("Cache-Control", "no-store");
  c.header("Referrer-Policy", "no-referrer");
  // One click confirms: no other site may frame the button.
  c.header("X-Frame-Options", "DENY");
  c.header(
    "Content-Security-Policy",
    "default-src 'none'; style-src 'unsafe-inline'; " +
      "form-action 'self'; frame-ancestors 'none'",
  );
  return c.html(body, status);
}

/** `GET`/`POST /v1/notifications/confirm`. */
export function notifyConfirmRoutes({ db }: AppDeps) {
  const router = new Hono();

  router.get(CONFIRM_PATH, async (c) => {
    const token = c.req.query("token") ?? "";
    const found = await addressOfToken(db, token, Date.now());
    if (found === null) return html(c, GONE, 404);
    return html(
      c,
      page(
        "Confirm notifications to this address",
        `<p>Send formrelay's delivery notifications for an organization to ` +
          `<strong>${escapeHtml(maskAddress(found.address))}</strong>?</p>` +
          `<form method="post" action="${CONFIRM_PATH}">` +
          `<input type="hidden" name="token" value="${escapeHtml(token)}">` +
          `<button type="submit">Confirm</button></form>` +
          "<p>If you did not expect this, close this page: nothing will be sent.</p>",
      ),
      200,
    );
  });

  router.post(CONFIRM_PATH, async (c) => {
    if (Number(c.req.header("content-length") ?? 0) > MAX_BODY) return html(c, GONE, 413);
    const text = await c.req.text();
    if (text.length > MAX_BODY) return html(c, GONE, 413);
    const token = new URLSearchParams(text).get("token") ?? "";
    const confirmed = await confirmByToken(db, token, Date.now());
    if (confirmed === null) return html(c, GONE, 404);
    return html(
      c,
      page(
        "Address confirmed",
        `<p><strong>${escapeHtml(maskAddress(confirmed.address))}</strong> now gets ` +
          "formrelay's notifications for the organization. Its owner can remove the address " +
          "at any time.</p>",
      ),
      200,
    );
  });

  refuseOtherMethods(router, CONFIRM_PATH);
  return router;
}

/** The OpenAPI operations of these routes (assembled in routes/openapi.ts). */
export const notifyConfirmOperations: OperationSpec[] = (["get", "post"] as const).map((
  method,
): OperationSpec => ({
  method,
  path: "/v1/notifications/confirm",
  summary: method === "get"
    ? "A notification address's confirmation link (`?token=`): a page with one button, " +
      "changing nothing"
    : "The button's form post (`token`, form-encoded): confirms the address",
  tag: "Service",
  ...(method === "get" ? { query: z.strictObject({ token: z.string() }) } : {}),
  answers: {
    200: { description: "The page", contentType: "text/html" },
    404: {
      description: "The link is unknown, expired, replaced or used",
      contentType: "text/html",
    },
  },
  errors: [],
}));
