// Starts Swagger UI on this service's own description (a file, not an inline script: CSP).
globalThis.SwaggerUIBundle({
  url: "/v1/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
});
