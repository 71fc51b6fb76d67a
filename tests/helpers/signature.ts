/**
 * The Standard Webhooks signature a receiver checks, worked out independently of the
 * connector's own signing: `v1,` + base64 HMAC-SHA256 of `<id>.<timestamp>.<body>`, keyed
 * with the base64 part of the `whsec_` secret.
 */
export async function standardWebhookSignature(
  secret: string,
  received: { headers: Headers; body: string },
): Promise<string> {
  const key = await crypto.subtle.importKey(
    "raw",
    Uint8Array.fromBase64(secret.slice("whsec_".length)),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const id = received.headers.get("webhook-id");
  const timestamp = received.headers.get("webhook-timestamp");
  const content = new TextEncoder().encode(`${id}.${timestamp}.${received.body}`);
  return `v1,${new Uint8Array(await crypto.subtle.sign("HMAC", key, content)).toBase64()}`;
}
