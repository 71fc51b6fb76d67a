import { z } from "zod";

const email = z.email();
const recipients = z.array(email).min(1);

/** SMTP Variant A: the tenant supplies the relay (spec 2.3). */
export const smtpRelayConfigSchema = z.strictObject({
  host: z.string().min(1),
  port: z.number().int().min(1).max(65535),
  secureTransport: z.enum(["off", "starttls", "on"]).default("starttls"),
  username: z.string().min(1),
  password: z.string().min(1),
  from: email,
  to: recipients,
  subjectTemplate: z.string().min(1).default("New submission: {{formName}}"),
});

/** SMTP Variant B: the platform relay from PLATFORM_SMTP_* (spec 2.3). */
export const smtpPlatformConfigSchema = z.strictObject({
  to: recipients,
  subjectTemplate: z.string().min(1).default("Form submission: {{formName}}"),
});

export type SmtpRelayConfig = z.infer<typeof smtpRelayConfigSchema>;
export type SmtpPlatformConfig = z.infer<typeof smtpPlatformConfigSchema>;
export type SmtpConfig = SmtpRelayConfig | SmtpPlatformConfig;

/** Variant A configs are told apart from Variant B by their relay host (CONTRACT). */
export function isRelayConfig(config: SmtpConfig): config is SmtpRelayConfig {
  return "host" in config;
}

/**
 * The smtp config schema: Variant A when `host` is given, else Variant B, which is
 * only valid when the platform relay is configured.
 */
export function smtpConfigSchema(platformConfigured: boolean): z.ZodType<SmtpConfig> {
  return z.unknown().transform((value, ctx): SmtpConfig => {
    const isObject = typeof value === "object" && value !== null;
    const schema = isObject && "host" in value ? smtpRelayConfigSchema : smtpPlatformConfigSchema;
    const result = schema.safeParse(value);
    if (!result.success) {
      for (const issue of result.error.issues) ctx.addIssue({ ...issue, code: "custom" });
      return z.NEVER;
    }
    if (schema === smtpPlatformConfigSchema && !platformConfigured) {
      ctx.addIssue({
        code: "custom",
        message:
          "The platform SMTP relay is not configured on this deployment: give host, port, username, password and from",
      });
      return z.NEVER;
    }
    return result.data;
  }) as unknown as z.ZodType<SmtpConfig>;
}
