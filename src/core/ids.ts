import { randomBase62 } from "./apiKeys";

/** Opaque identifiers with a readable kind prefix. */
export function newId(prefix: string, length = 24): string {
  return `${prefix}${randomBase62(length)}`;
}
