/** Following the confirmation links notification addresses are sent, as their owners would. */
import assert from "node:assert/strict";
import type { Harness } from "./harness.ts";
import type { CapturedMessage, TestSmtpServer } from "./smtp_server.ts";

/** The confirmation link's token in a message (quoted-printable decoded). */
export function confirmationTokenOf(message: CapturedMessage): string {
  const text = message.raw.replace(/=\r\n/g, "").replace(
    /=([0-9A-F]{2})/g,
    (_, hex) => String.fromCharCode(parseInt(hex, 16)),
  );
  const match = text.match(/\/v1\/notifications\/confirm\?token=([\w-]+)/);
  assert.ok(match, "the message carries the confirmation link");
  return match[1];
}

/** Posts a confirmation page's button. */
export function postConfirmation(h: Harness, token: string): Promise<Response> {
  return h.request("/v1/notifications/confirm", {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token }).toString(),
  });
}

/** Waits for `count` messages in all and confirms every address a confirmation went to. */
export async function confirmAddresses(h: Harness, server: TestSmtpServer, count: number) {
  await server.waitForMessages(count);
  for (const message of server.messages) {
    if (!/^Subject: Confirm this address/m.test(message.raw)) continue;
    const response = await postConfirmation(h, confirmationTokenOf(message));
    assert.equal(response.status, 200);
    await response.body?.cancel();
  }
}
