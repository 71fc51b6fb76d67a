/**
 * A small client of the admin API over HTTP, for the tests and benchmarks that run the
 * service as a process.
 *
 * @module
 */

/** An answer of the admin API. */
export interface AdminAnswer {
  status: number;
  text: string;
  // deno-lint-ignore no-explicit-any
  body: any;
}

/** An admin API client over HTTP; `origin` is read per call (it changes across restarts). */
export type AdminClient = (
  method: string,
  path: string,
  body?: unknown,
  tenantKey?: string,
) => Promise<AdminAnswer>;

/** An admin client for `tenantKey` against the service at `origin()`. */
export function adminClient(origin: () => string, tenantKey: string): AdminClient {
  return async (method, path, body, key = tenantKey) => {
    const response = await fetch(`${origin()}/v1/admin${path}`, {
      method,
      headers: {
        "x-tenant-key": key,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let parsed = null;
    try {
      parsed = JSON.parse(text);
    } catch { /* not JSON */ }
    return { status: response.status, text, body: parsed };
  };
}

/** Creates a form with destinations; throws on any non-200. Returns ids and the public key. */
export async function createFormWith(
  admin: AdminClient,
  name: string,
  destinations: Record<string, unknown>[],
): Promise<{ formId: string; publicKey: string; destinationIds: string[] }> {
  const created = await admin("POST", "/forms", { name });
  if (created.status !== 200) throw new Error(`create form: ${created.text}`);
  const destinationIds: string[] = [];
  for (const destination of destinations) {
    const added = await admin("POST", `/forms/${created.body.form.id}/destinations`, destination);
    if (added.status !== 200) throw new Error(`add destination: ${added.text}`);
    destinationIds.push(added.body.destination.id);
  }
  return { formId: created.body.form.id, publicKey: created.body.form.publicKey, destinationIds };
}
