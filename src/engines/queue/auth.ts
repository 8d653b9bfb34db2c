/**
 * How each queue API wants the api_key: Replicate `Authorization: Bearer <key>` (the shared
 * rule of credentials.ts), fal `Authorization: Key <key>`, Black Forest Labs `x-key: <key>`.
 * An account without an api_key follows the shared rule (basic auth, or nothing).
 */
import { authorizationFor, type AccountCredentials } from "../credentials";

export type KeyScheme = "bearer" | "key" | "x-key";

export function queueAuthHeaders(scheme: KeyScheme, account: AccountCredentials): Record<string, string> {
  if (account.api_key && scheme === "key") return { authorization: `Key ${account.api_key}` };
  if (account.api_key && scheme === "x-key") return { "x-key": account.api_key };
  const authorization = authorizationFor(account);
  return authorization === undefined ? {} : { authorization };
}
