/**
 * The console's only way to the service: the admin API, with the tenant key in the
 * `x-tenant-key` header, as any client. The key lives in this tab's sessionStorage:
 * never in a URL, a cookie or localStorage, and gone when the tab closes or on sign-out.
 */

const KEY = "formrelay.tenantKey";

/** The signed-in tenant key, or null. */
export function tenantKey() {
  return sessionStorage.getItem(KEY);
}

/** Keeps a key for this tab. */
export function signIn(key) {
  sessionStorage.setItem(KEY, key);
}

/** Forgets the key. */
export function signOut() {
  sessionStorage.removeItem(KEY);
}

/**
 * Thrown for a 401: the key is no longer valid (rotated elsewhere, or revoked), or
 * (`disabled`) its organization was disabled by the host.
 */
export class SignedOut extends Error {
  get disabled() {
    return this.message.startsWith("Organization disabled");
  }
}

/** What the sign-in page says after a SignedOut. */
export function signedOutNotice(error) {
  return error.disabled
    ? "Your organization is disabled by the host of this service: its keys are refused and " +
      "its forms take no submissions, and no notification is sent to you meanwhile. Ask the " +
      "host to enable it again."
    : `Signed out: ${error.message}. The key may have been rotated.`;
}

/**
 * Calls the admin API; resolves `{ status, body }` for any JSON answer (errors too, so
 * forms can show them), throws SignedOut on 401.
 */
export async function api(method, path, body, key = tenantKey()) {
  const headers = { "x-tenant-key": key ?? "", accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`/v1/admin${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const answer = await response.json().catch(() => ({
    ok: false,
    error: `HTTP ${response.status}`,
  }));
  if (response.status === 401) throw new SignedOut(answer.error);
  return { status: response.status, body: answer };
}

/** Calls the admin API and returns the body of a 200; throws an Error with the API's text. */
export async function apiOk(method, path, body) {
  const { status, body: answer } = await api(method, path, body);
  if (status !== 200) throw new Error(answer.error ?? `HTTP ${status}`);
  return answer;
}

/**
 * Why a destination does not receive deliveries on its own account, or null. The one
 * place that reads the health fields: a future "paused" state goes here.
 */
export function healthIssue(destination) {
  if (destination.health?.state === "paused") {
    const { reason, since } = destination.health;
    const at = since ? new Date(since).toLocaleString() : "—";
    return {
      label: "Paused",
      reason,
      since,
      // One message: when, why (the service's reason), and what it means for submissions.
      text: `Paused since ${at}: ${reason ?? "unknown reason"}. ` +
        "New submissions are held until you resume it.",
    };
  }
  return null;
}

/**
 * Names of the destination types as people know them, filled from the deployment's
 * destination types by deployment() (every view that shows destinations awaits it).
 */
export const TYPE_NAMES = {};

/** A destination's target in one line, without secrets. */
export function targetOf(destination) {
  const config = destination.config ?? {};
  if (destination.type === "smtp") {
    const to = (config.to ?? []).join(", ");
    return config.host ? `${to} via ${config.host}:${config.port}` : `${to} (platform relay)`;
  }
  if (config.chatId !== undefined) return `chat ${config.chatId}`;
  // A URL whose path is the credential (chat webhooks) is shown as "********": no target.
  if (typeof config.url !== "string" || !URL.canParse(config.url)) return "";
  return `${config.method ? `${config.method} ` : ""}${displayUrl(config.url)}`;
}

/** A destination in one line for people: its name (when it has one), type and target. */
export function destinationLabel(destination) {
  const what = `${TYPE_NAMES[destination.type]} ${targetOf(destination)}`.trim();
  return destination.name ? `${destination.name} · ${what}` : what;
}

/** A URL without its query, fragment or credentials, which may hold secrets (as the logs do). */
function displayUrl(url) {
  try {
    const { origin, pathname } = new URL(url);
    return origin + pathname;
  } catch {
    return "(invalid URL)";
  }
}

let deploymentAnswer = null;

/**
 * What this deployment offers (`GET /deployment`): the captcha provider, whether the
 * platform email relay is configured. Read once per page load: it changes only with a
 * restart of the service.
 */
export function deployment() {
  deploymentAnswer ??= apiOk("GET", "/deployment").then((answer) => {
    for (const { type, label } of answer.destinationTypes) TYPE_NAMES[type] = label;
    return answer;
  }).catch((error) => {
    deploymentAnswer = null;
    throw error;
  });
  return deploymentAnswer;
}
