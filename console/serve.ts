/**
 * Serves the tenant console (`/`, `/console/{file}`) and the API reference page
 * (`/v1/docs`, `/v1/docs/{file}` from npm `swagger-ui-dist`): static files only, from our
 * own origin, with security headers. The console is a plain client of the admin API
 * (console/static/api.js); this module gives it no other way in.
 *
 * @module
 */
import { type Context, Hono } from "hono";
import { createMiddleware } from "hono/factory";
import { refuseOtherMethods } from "../routes/http.ts";
// Imported only so that the package counts as used: `task start` installs npm packages on
// first use (--unstable-npm-lazy-caching), and the files below are read, never imported.
import "swagger-ui-dist/package.json" with { type: "json" };

const STATIC = new URL("./static/", import.meta.url);

const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
  png: "image/png",
};

/** The console's policy: its own scripts, styles and API only; never framed. */
const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** The reference page's: Swagger UI sets inline styles (never inline scripts). */
const DOCS_CSP = CONSOLE_CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'");

/**
 * The folder of `swagger-ui-dist`, resolved without importing the package: its entry
 * module loads the 1.4 MB browser bundle into the server.
 */
const SWAGGER_DIR = new URL(".", import.meta.resolve("swagger-ui-dist"));

/** The files of `swagger-ui-dist` the reference page uses. */
const SWAGGER_FILES = new Set(["swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png"]);

/** Console file names: flat, lower case, known types, so a name can never leave the folder. */
const STATIC_NAME = /^[a-z0-9_]+\.(html|js|css|svg|png)$/;

function setSecurityHeaders(c: Context, csp: string) {
  c.header("Content-Security-Policy", csp);
  c.header("X-Content-Type-Options", "nosniff");
  c.header("Referrer-Policy", "no-referrer");
  c.header("X-Frame-Options", "DENY");
  c.header("Cross-Origin-Opener-Policy", "same-origin");
  c.header("Permissions-Policy", "camera=(), microphone=(), geolocation=()");
}

/** Reads files once and keeps them: they only change with a deployment. */
function fileCache() {
  const files = new Map<string, Promise<Uint8Array<ArrayBuffer> | null>>();
  return (url: URL) => {
    let file = files.get(url.href);
    if (file === undefined) {
      file = Deno.readFile(url).catch((error) => {
        if (error instanceof Deno.errors.NotFound) return null;
        files.delete(url.href);
        throw error;
      });
      files.set(url.href, file);
    }
    return file;
  };
}

/** The console and reference page routes. */
export function consoleRoutes() {
  const router = new Hono();
  const read = fileCache();

  async function sendFile(c: Context, url: URL, cacheControl: string) {
    const body = await read(url);
    if (body === null) return c.text("Not found", 404);
    const extension = url.pathname.slice(url.pathname.lastIndexOf(".") + 1);
    c.header("Content-Type", CONTENT_TYPES[extension] ?? "application/octet-stream");
    c.header("Cache-Control", cacheControl);
    return c.body(body);
  }

  const secured = (csp: string) =>
    createMiddleware(async (c, next) => {
      await next();
      setSecurityHeaders(c, csp);
    });
  router.use("/", secured(CONSOLE_CSP));
  router.use("/console/*", secured(CONSOLE_CSP));
  router.use("/v1/docs", secured(DOCS_CSP));
  router.use("/v1/docs/*", secured(DOCS_CSP));

  router.get("/", (c) => sendFile(c, new URL("index.html", STATIC), "no-cache"));
  router.get("/console/:file", (c) => {
    const name = c.req.param("file");
    if (!STATIC_NAME.test(name) || name === "index.html") return c.text("Not found", 404);
    return sendFile(c, new URL(name, STATIC), "no-cache");
  });
  router.get("/v1/docs", (c) => sendFile(c, new URL("docs.html", STATIC), "no-cache"));
  router.get("/v1/docs/:file", (c) => {
    const name = c.req.param("file");
    if (!SWAGGER_FILES.has(name)) return c.text("Not found", 404);
    const url = new URL(name, SWAGGER_DIR);
    return sendFile(c, url, "public, max-age=86400");
  });
  refuseOtherMethods(router, "/", "/console/:file", "/v1/docs", "/v1/docs/:file");
  return router;
}
