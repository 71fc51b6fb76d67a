import assert from "node:assert/strict";

/** An error body; `issues` and `detail` are there only on the errors that carry them. */
export interface ErrorBody {
  ok: false;
  error: string;
  issues: { path: string; message: string }[];
  detail: string;
  retryAfter?: number;
}

/**
 * Asserts an error answer of the contract: the status, a JSON content type and the body
 * `{ ok: false, error }`; returns the body for further checks of its detail fields.
 */
export async function expectError(
  response: Response,
  status: number,
  error: string,
): Promise<ErrorBody> {
  const body = await response.json();
  assert.equal(response.status, status, JSON.stringify(body));
  assert.match(response.headers.get("content-type") ?? "", /application\/json/);
  assert.equal(body.ok, false);
  assert.equal(body.error, error);
  return body;
}
