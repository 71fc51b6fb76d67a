import type { Logger } from "../log.ts";
import { Refusal } from "./refusal.ts";

/** How long a captcha provider may take before it counts as unavailable. */
const CAPTCHA_TIMEOUT_MS = 5000;
/** What an answer for an unavailable captcha provider asks the page to wait, in seconds. */
const CAPTCHA_RETRY_AFTER_SECONDS = 30;

/**
 * What a captcha check found: the token is valid or invalid (the provider's verdict), or
 * the provider could not give one (`unavailable`: unreachable, too slow, 5xx or 429, or
 * an answer that is not its JSON), with why in `cause` for the log.
 */
export type CaptchaCheck =
  | { outcome: "valid" | "invalid" }
  | { outcome: "unavailable"; cause: string };

/**
 * Verifies a captcha token server-side: a form-encoded POST of `secret`, `response`
 * and `remoteip` (hCaptcha, reCAPTCHA and Turnstile all take it). Only HTTP 200 with
 * JSON `success: true` passes. A provider that gives no verdict is told apart from a
 * bad token: an outage is not the visitor's fault, and the owner must see it as such.
 */
export async function verifyCaptcha(
  verifyUrl: string,
  request: { secret: string; token: string; remoteIp: string | null },
): Promise<CaptchaCheck> {
  const body = new URLSearchParams({ secret: request.secret, response: request.token });
  if (request.remoteIp) body.set("remoteip", request.remoteIp);
  let response: Response;
  try {
    response = await fetch(verifyUrl, {
      method: "POST",
      body,
      signal: AbortSignal.timeout(CAPTCHA_TIMEOUT_MS),
    });
  } catch (error) {
    const timedOut = error instanceof DOMException && error.name === "TimeoutError";
    return { outcome: "unavailable", cause: timedOut ? "no answer in time" : "unreachable" };
  }
  if (response.status !== 200) {
    await response.body?.cancel();
    const down = response.status >= 500 || response.status === 429;
    return down
      ? { outcome: "unavailable", cause: `answered HTTP ${response.status}` }
      : { outcome: "invalid" };
  }
  try {
    const result = await response.json();
    return { outcome: result?.success === true ? "valid" : "invalid" };
  } catch {
    return { outcome: "unavailable", cause: "answered something other than its JSON" };
  }
}

/** What the answer for an unavailable captcha provider says beside the contract's text. */
export const CAPTCHA_UNAVAILABLE_DETAIL =
  "The captcha service could not be reached: this is not the visitor's fault, try again later";

/**
 * The refusal of a submission whose captcha did not pass: `400 Invalid captcha token`,
 * the contract's answer either way. For an unavailable provider the answer also carries
 * `detail` and `retryAfter` (and the Retry-After header), so a page can ask the visitor
 * to try again, and a warning goes to the log naming the form and why, never the token or
 * the secret.
 */
export function captchaRefusal(
  check: CaptchaCheck,
  { logger, form, verifyUrl }: {
    logger: Logger;
    form: { id: string; orgId: string };
    verifyUrl: string;
  },
): Refusal {
  if (check.outcome !== "unavailable") return new Refusal("captchaInvalid");
  logger.warn("captcha provider unavailable", {
    orgId: form.orgId,
    formId: form.id,
    provider: captchaProviderOf(verifyUrl).verifyHost,
    reason: check.cause,
  });
  return new Refusal("captchaUnavailable", {
    detail: CAPTCHA_UNAVAILABLE_DETAIL,
    retryAfter: CAPTCHA_RETRY_AFTER_SECONDS,
  });
}

/**
 * The body fields the captcha widgets put their token in (hCaptcha, Turnstile,
 * reCAPTCHA), so a plain HTML form with a widget needs no script to send it.
 */
export const CAPTCHA_BODY_FIELDS = [
  "h-captcha-response",
  "cf-turnstile-response",
  "g-recaptcha-response",
] as const;

/**
 * The captcha token of a submission: the `x-captcha-token` header when present, else the
 * first widget body field with a value (CONTRACT "Extensions"). The widget fields are
 * removed from an object payload either way: a token is no content for the form's owner.
 */
export function takeCaptchaToken(payload: unknown, header: string | undefined): string | null {
  let fromBody: string | null = null;
  if (typeof payload === "object" && payload !== null && !Array.isArray(payload)) {
    const fields = payload as Record<string, unknown>;
    for (const name of CAPTCHA_BODY_FIELDS) {
      if (!Object.hasOwn(fields, name)) continue;
      const value = fields[name];
      delete fields[name];
      const first = Array.isArray(value) ? value[0] : value;
      if (fromBody === null && typeof first === "string" && first !== "") fromBody = first;
    }
  }
  return header ? header : fromBody;
}

/** A captcha provider as the console shows it to tenants. */
export interface CaptchaProvider {
  /** `hcaptcha`, `turnstile`, `recaptcha`, or `other` for a verify URL of another service. */
  id: "hcaptcha" | "turnstile" | "recaptcha" | "other";
  /** Its name for people. */
  name: string;
  /** The host this deployment verifies tokens with. */
  verifyHost: string;
}

/** The provider behind a deployment's CAPTCHA_VERIFY_URL, told by its host. */
export function captchaProviderOf(verifyUrl: string): CaptchaProvider {
  const host = new URL(verifyUrl).hostname.toLowerCase();
  const under = (domain: string) => host === domain || host.endsWith(`.${domain}`);
  if (under("hcaptcha.com")) return { id: "hcaptcha", name: "hCaptcha", verifyHost: host };
  if (under("challenges.cloudflare.com")) {
    return { id: "turnstile", name: "Cloudflare Turnstile", verifyHost: host };
  }
  if (under("google.com") || under("recaptcha.net")) {
    return { id: "recaptcha", name: "Google reCAPTCHA", verifyHost: host };
  }
  return { id: "other", name: `The captcha service at ${host}`, verifyHost: host };
}
