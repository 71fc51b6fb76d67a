import { z } from "zod";

/** Standard Webhooks signing secret: `whsec_` + base64 of at least 24 bytes. */
const webhookSecret = z.string().refine((value) => {
  if (!value.startsWith("whsec_")) return false;
  try {
    return Uint8Array.fromBase64(value.slice(6)).length >= 24;
  } catch {
    return false;
  }
}, 'Expected "whsec_" followed by at least 24 bytes in base64');

/** Webhook destination config (spec 2.3, plus the contract's optional `secret`). */
export const webhookConfigSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  method: z.enum(["POST", "PUT", "PATCH"]).default("POST"),
  headers: z.record(
    z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, "Invalid header name"),
    z.string().regex(/^[^\r\n\0]*$/, "Header values cannot contain line breaks"),
  ).default({}),
  secret: webhookSecret.optional(),
});

export type WebhookConfig = z.infer<typeof webhookConfigSchema>;
