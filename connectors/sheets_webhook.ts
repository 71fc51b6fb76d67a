import { z } from "zod";

/** Spreadsheet script web app destination config (spec 2.3). */
export const sheetsWebhookConfigSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  method: z.enum(["POST", "PUT"]).default("POST"),
  authHeader: z.string().min(1).regex(/^[^\r\n\0]*$/, "Cannot contain line breaks").optional(),
});

export type SheetsWebhookConfig = z.infer<typeof sheetsWebhookConfigSchema>;
