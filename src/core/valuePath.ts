/**
 * A JSON pointer as people write a field's path: "/messages/3/role" → "messages[3].role",
 * "/upstreams/0/id" → "upstreams[0].id"; "" (the whole value) → null. Used for API error
 * `param`s and configuration errors alike.
 */
export function pathFromPointer(pointer: string): string | null {
  const parts = pointer.split("/").filter(Boolean).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (parts.length === 0) return null;
  return parts.map((p, i) => (/^\d+$/.test(p) ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");
}
