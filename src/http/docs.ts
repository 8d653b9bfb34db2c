/**
 * Swagger UI at /docs, from swagger-ui-dist assets compiled into the binary (no CDN), reading
 * the document at /openapi.json.
 */
import { Elysia } from "elysia";
import swaggerCss from "swagger-ui-dist/swagger-ui.css" with { type: "text" };
import swaggerBundle from "swagger-ui-dist/swagger-ui-bundle.js" with { type: "text" };

const page = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Atelier API — Swagger UI</title>
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/assets/init.js"></script>
</body>
</html>`;

// Swagger UI draws an array's items with the component named after their type and format; an
// array of files (the edit's \`image[]\`) asks for JsonSchema_string_binary, which it does not
// have (it warns, and its fallback is fragile). The string component already draws a file
// picker for a binary string: it serves that name too.
const init = `const filesInArrays = (system) => ({
  components: {
    JsonSchema_string_binary: (props) => system.React.createElement(system.getComponent("JsonSchema_string"), props),
  },
});
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  plugins: [filesInArrays],
  dom_id: "#swagger-ui",
  deepLinking: true,
  persistAuthorization: true,
  tryItOutEnabled: true,
  displayRequestDuration: true,
});`;

const immutable = "public, max-age=86400";

export function docsRoutes() {
  return new Elysia({ name: "docs" })
    .get("/docs", () => new Response(page, { headers: { "content-type": "text/html; charset=utf-8" } }), { detail: { hide: true } })
    .get("/docs/assets/swagger-ui.css", () => new Response(swaggerCss, { headers: { "content-type": "text/css; charset=utf-8", "cache-control": immutable } }), { detail: { hide: true } })
    .get("/docs/assets/swagger-ui-bundle.js", () => new Response(swaggerBundle, { headers: { "content-type": "text/javascript; charset=utf-8", "cache-control": immutable } }), { detail: { hide: true } })
    .get("/docs/assets/init.js", () => new Response(init, { headers: { "content-type": "text/javascript; charset=utf-8" } }), { detail: { hide: true } });
}
