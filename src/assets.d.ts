// Files imported `with { type: "text" }` are embedded into the binary as strings.
declare module "*.css" {
  const text: string;
  export default text;
}
declare module "swagger-ui-dist/swagger-ui-bundle.js" {
  const text: string;
  export default text;
}
