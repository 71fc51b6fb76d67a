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
