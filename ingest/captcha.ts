/** How long a captcha provider may take before the token counts as invalid. */
const CAPTCHA_TIMEOUT_MS = 5000;

/**
 * Verifies a captcha token server-side: a form-encoded POST of `secret`, `response`
 * and `remoteip` (hCaptcha, reCAPTCHA and Turnstile all take it). Only HTTP 200 with
 * JSON `success: true` passes; anything else, a time-out included, fails closed.
 */
export async function verifyCaptcha(
  verifyUrl: string,
  request: { secret: string; token: string; remoteIp: string | null },
): Promise<boolean> {
  const body = new URLSearchParams({ secret: request.secret, response: request.token });
  if (request.remoteIp) body.set("remoteip", request.remoteIp);
  try {
    const response = await fetch(verifyUrl, {
      method: "POST",
      body,
      signal: AbortSignal.timeout(CAPTCHA_TIMEOUT_MS),
    });
    if (response.status !== 200) {
      await response.body?.cancel();
      return false;
    }
    const result = await response.json();
    return result?.success === true;
  } catch {
    return false;
  }
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
