/**
 * Users and keys as the CLI and the workbench see them: hashing, validation and the
 * throttled last-used bookkeeping. SQL stays in the store.
 */
import { generateApiKey, hashApiKey, type NewApiKey } from "./apiKeys";
import type { AccountStore, ApiKeyRow, KeyOwner, Role, UserRow } from "./store";
import { MAX_EMAIL_CHARS } from "./limits";
import type { Clock } from "./clock";
import { isKeyExpired, type KeyLimits } from "./keyLimits";


const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

export class AccountError extends Error {
  override name = "AccountError";
}

export function normalizeEmail(email: string): string {
  return email.trim();
}

export function validateEmail(email: string): string | null {
  if (email.length > MAX_EMAIL_CHARS || !EMAIL.test(email)) return "must be a valid email address";
  return null;
}

export async function hashPassword(password: string): Promise<string> {
  return Bun.password.hash(password, { algorithm: "argon2id" });
}

export async function verifyPassword(password: string, hash: string | null): Promise<boolean> {
  if (!hash) return false;
  try {
    return await Bun.password.verify(password, hash);
  } catch {
    return false;
  }
}

export async function addUser(
  store: AccountStore,
  clock: Clock,
  input: { email: string; password?: string | null; role?: Role; credits?: number; actor?: string },
): Promise<UserRow> {
  const email = normalizeEmail(input.email);
  const problem = validateEmail(email);
  if (problem) throw new AccountError(`email ${problem}`);
  const credits = input.credits ?? 0;
  if (!Number.isInteger(credits) || credits < 0) throw new AccountError("credits must be a non-negative integer");
  const passwordHash = input.password ? await hashPassword(input.password) : null;
  return store.users.create({ email, passwordHash, role: input.role ?? "user", credits, actor: input.actor }, clock());
}

export function createKey(store: AccountStore, clock: Clock, userId: number, name: string, limits?: KeyLimits): { key: NewApiKey; row: ApiKeyRow } {
  const key = generateApiKey();
  const row = store.keys.create({ userId, name, prefix: key.prefix, secretHash: key.hash, ...(limits ? { limits } : {}) }, clock());
  return { key, row };
}

/**
 * Looks a presented key up by its hash on every request (a point query), so a revocation by
 * the CLI is seen at once. last_used_at is written at most once a minute per key.
 */
export class KeyAuthenticator {
  private readonly lastWrite = new Map<number, number>();
  constructor(
    private readonly store: AccountStore,
    private readonly clock: Clock,
    private readonly touchEveryMs = 60_000,
  ) {}

  lookup(secret: string): KeyOwner | null {
    const owner = this.store.keys.ownerByHash(hashApiKey(secret));
    if (owner && owner.key_revoked_at === null && !owner.disabled && !this.expired(owner)) this.touch(owner.key_id);
    return owner;
  }

  /** The key's expiry has passed (by this authenticator's clock). */
  expired(owner: KeyOwner): boolean {
    return isKeyExpired({ expiresAt: owner.key_expires_at }, this.clock());
  }

  private touch(keyId: number): void {
    const now = this.clock();
    const last = this.lastWrite.get(keyId);
    if (last !== undefined && now - last < this.touchEveryMs) return;
    // Skipped while another process holds the write lock: tried again on a later request.
    if (this.store.keys.touch(keyId, now)) this.lastWrite.set(keyId, now);
  }
}
