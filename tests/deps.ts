/**
 * The npm packages only tests and benchmarks use, pinned here with `npm:` specifiers and
 * not in deno.json's imports: with `nodeModulesDir: "auto"`, `deno run` installs every
 * package of that import map at start-up, so `deno task start` would fetch a browser
 * driver and an SMTP server the service never loads. `deno.lock` locks these too.
 *
 * @module
 */
export { type Browser, type BrowserContext, chromium, type Page } from "npm:playwright-core@1.65.1";
export { default as AxeBuilder } from "npm:@axe-core/playwright@4.14.0";
export { SMTPServer, type SMTPServerOptions } from "npm:smtp-server@3.21.6";
export { default as nodemailer } from "npm:nodemailer@10.6.0";
export { default as PostalMime } from "npm:postal-mime@4.0.0";
export { Validator } from "npm:@seriousme/openapi-schema-validator@2.11.0";
export { Webhook as StandardWebhook } from "npm:standardwebhooks@1.1.1";
export { Webhook as SvixWebhook } from "npm:svix@2.5.0";
