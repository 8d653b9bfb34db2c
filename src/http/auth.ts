/**
 * Who is calling /v1: an API key in `Authorization: Bearer`, or (for the workbench
 * playground) a signed-in session that the workbench resolves.
 */
import { Elysia } from "elysia";
import type { KeyAuthenticator } from "../core/accounts";
import type { KeyOwner } from "../core/store";
import type { Role } from "../store/users";
import { ApiError, forbidden, unauthorized } from "./errors";
import { isModelAllowed, parseAllowedModels, type KeyLimits } from "../core/keyLimits";
import { metaOf, type RequestMeta } from "./requestMeta";

export interface Principal {
  userId: number;
  keyId: number | null;
  /** The key's display prefix, for the access log; absent for a session. */
  keyPrefix?: string;
  email: string;
  role: Role;
  via: "key" | "session";
  /** The API key's name and limits; absent for a session (the workbench has no key limits). */
  key?: { name: string; createdAt: number; limits: KeyLimits };
}

export interface ApiAuthDeps {
  keys: KeyAuthenticator;
  /**
   * Resolves a browser session for same-origin playground calls (enforcing CSRF itself);
   * resolves null when the request carries no session. Throws an ApiError to refuse.
   */
  sessionPrincipal?: (request: Request) => Promise<Principal | null>;
}

/**
 * Who is calling, or the 401/403 to send. Records the user on the request's meta, so the log
 * line names them even when the request fails later (a 400 from validation runs before the
 * route's own auth step, and the server authenticates API bodies before the app sees them).
 * The principal itself (no promise) when it is known at once: a key whose owner is in memory.
 */
export function authenticateApiRequest(request: Request, deps: ApiAuthDeps): Principal | Promise<Principal> {
  // The server (before the body), the parse hook and the route's resolve all ask; one lookup
  // (hash + cache or query) per request serves them all, the same answer or the same refusal.
  const meta = metaOf(request);
  if (meta.principal) return meta.principal;
  if (meta.authenticated) return meta.authenticated;
  let found: Principal | Promise<Principal>;
  try {
    found = resolvePrincipal(request, deps);
  } catch (e) {
    // The same refusal for every later step of this request (handled here: nobody may ask again).
    meta.authenticated = Promise.reject(e);
    meta.authenticated.catch(() => {});
    throw e;
  }
  if (!(found instanceof Promise)) return remember(meta, found);
  meta.authenticated = found.then((principal) => remember(meta, principal));
  return meta.authenticated;
}

function remember(meta: RequestMeta, principal: Principal): Principal {
  meta.principal = principal;
  meta.userId = principal.userId;
  return principal;
}

function resolvePrincipal(request: Request, deps: ApiAuthDeps): Principal | Promise<Principal> {
  const header = request.headers.get("authorization");
  if (!header) return sessionOrRefusal(request, deps);
  const secret = bearerSecret(header);
  const owner = deps.keys.lookup(secret);
  if (owner instanceof Promise) return owner.then((found) => principalOfOwner(found, found !== null && deps.keys.expired(found)));
  return principalOfOwner(owner, owner !== null && deps.keys.expired(owner));
}

/**
 * The principals of the key owners the authenticator keeps in memory, made once per owner: an
 * owner record never changes (a change to the key or user drops it and a new one is read), and
 * nothing changes a principal once made. Expiry is a matter of time, so it is checked every time.
 */
const principals = new WeakMap<KeyOwner, Principal>();

function principalOfOwner(owner: KeyOwner | null, expired: boolean): Principal {
  const known = owner !== null && !expired ? principals.get(owner) : undefined;
  if (known) return known;
  const principal = keyPrincipal(owner, expired);
  principals.set(owner!, principal);
  return principal;
}

async function sessionOrRefusal(request: Request, deps: ApiAuthDeps): Promise<Principal> {
  const session = await deps.sessionPrincipal?.(request);
  if (session) return session;
  throw missingApiKey();
}

export function missingApiKey(): ApiError {
  return unauthorized(
    "You didn't provide an API key. Send it in the Authorization header as 'Authorization: Bearer sk-atl-…'; create one in the workbench (API) or with `atelier key create`.",
    "missing_api_key",
  );
}

/** `Bearer <key>` with one space and nothing after the key. */
const CANONICAL_BEARER = /^Bearer \S+$/;

/** The key in an Authorization header; a 401 when the header is not `Bearer <key>`. */
export function bearerSecret(header: string): string {
  // The form every client sends, checked without building a match (this runs on every API request).
  if (CANONICAL_BEARER.test(header)) return header.slice(7);
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) {
    throw unauthorized("Malformed Authorization header; use 'Authorization: Bearer sk-atl-…'.", "invalid_authorization_header");
  }
  return match[1]!;
}

/** The caller a key's owner makes, or the 401/403 for an unknown, revoked or expired key or a disabled account. */
export function keyPrincipal(owner: KeyOwner | null, expired: boolean): Principal {
  if (!owner || owner.key_revoked_at !== null) {
    // Never echo any part of the presented secret.
    throw unauthorized("Incorrect API key provided, or the key was revoked. Check the key or create a new one in the workbench.", "invalid_api_key");
  }
  if (expired) {
    throw unauthorized("This API key has expired. Create a new key in the workbench (API keys), or extend this one's expiry there.", "api_key_expired");
  }
  if (owner.disabled) throw forbidden("This account has been disabled; contact the administrator.", "account_disabled");
  const limits: KeyLimits = { expiresAt: owner.key_expires_at, creditCap: owner.key_credit_cap, allowedModels: parseAllowedModels(owner.key_allowed_models) };
  return {
    userId: owner.user_id,
    keyId: owner.key_id,
    keyPrefix: owner.key_prefix,
    email: owner.email,
    role: owner.role,
    via: "key",
    key: { name: owner.key_name, createdAt: owner.key_created_at, limits },
  };
}

/** Whether the caller may use a model: a key's allow-list decides; a session may use every model. */
export function mayUseModel(principal: Principal, modelId: string): boolean {
  return !principal.key || isModelAllowed(principal.key.limits, modelId);
}

/**
 * Refuses a model outside the key's allow-list: 403 with param "model", before anything is
 * charged or queued.
 */
export function assertModelAllowed(principal: Principal, modelId: string): void {
  if (mayUseModel(principal, modelId)) return;
  throw new ApiError(
    403,
    "permission_error",
    `This API key may not use the model '${modelId}'; its allowed models are: ${principal.key!.limits.allowedModels!.join(", ")}. Change the key's models in the workbench (API keys).`,
    "model",
    "model_not_allowed",
  );
}

/**
 * apiAuth for routes whose parse hook authenticates before it reads the body (acceptApiBody):
 * the principal is known by the time this runs, so it is taken without a promise (Elysia awaits
 * an async resolve on every request). Without one (no such parse hook ran) the caller is
 * refused, never let through.
 */
export function apiAuthAfterBody() {
  // Written without async/await or a returned call: Elysia reads the source to decide whether to await it.
  return new Elysia({ name: "auth.api.after-body" }).resolve({ as: "scoped" }, function principalFromBody({ request }) {
    const principal = metaOf(request).principal;
    if (principal) return { principal };
    throw missingApiKey();
  });
}

/** Adds `principal` to every route of the instance that uses it. */
export function apiAuth(deps: ApiAuthDeps) {
  return new Elysia({ name: "auth.api" }).resolve({ as: "scoped" }, async ({ request }) => {
    return { principal: await authenticateApiRequest(request, deps) };
  });
}
