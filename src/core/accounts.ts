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

/** Longest a revocation made by another process (the CLI) goes unseen by a running server. */
export const KEY_CHANGE_CHECK_MS = 100;
/** Key owners kept in memory; past it the cache starts over (a bound, not a working set). */
const MAX_CACHED_KEYS = 10_000;

/**
 * Finds who a presented key belongs to without a database lookup per request: owners found by
 * the key's hash stay in memory until something that could change them happens. A revocation,
 * a disabled user or a changed role in this process empties the cache at once (the store's
 * local revision); another process's writes (a CLI `key revoke`) are seen through SQLite's
 * data_version, checked at most every KEY_CHANGE_CHECK_MS. Unknown keys are never cached, so
 * a new key works at once and guessing cannot fill memory. last_used_at is written at most
 * once a minute per key.
 */
export class KeyAuthenticator {
  private readonly lastWrite = new Map<number, number>();
  private readonly owners = new Map<string, KeyOwner>();
  private seenLocal: number;
  private seenExternal: number;
  private checkedAt: number;

  constructor(
    private readonly store: AccountStore,
    private readonly clock: Clock,
    private readonly touchEveryMs = 60_000,
    private readonly changeCheckMs = KEY_CHANGE_CHECK_MS,
  ) {
    this.seenLocal = store.keys.localRevision();
    this.seenExternal = store.keys.externalRevision();
    this.checkedAt = clock();
  }

  lookup(secret: string): KeyOwner | null {
    const now = this.clock();
    this.dropIfChanged(now);
    const hash = hashApiKey(secret);
    let owner = this.owners.get(hash) ?? null;
    if (!owner) {
      owner = this.store.keys.ownerByHash(hash);
      if (owner) {
        if (this.owners.size >= MAX_CACHED_KEYS) this.owners.clear();
        this.owners.set(hash, owner);
      }
    }
    if (owner && owner.key_revoked_at === null && !owner.disabled && !this.expired(owner)) this.touch(owner.key_id, now);
    return owner;
  }

  /** The key's expiry has passed (by this authenticator's clock). */
  expired(owner: KeyOwner): boolean {
    return isKeyExpired({ expiresAt: owner.key_expires_at }, this.clock());
  }

  private dropIfChanged(now: number): void {
    const local = this.store.keys.localRevision();
    if (local !== this.seenLocal) {
      this.seenLocal = local;
      this.owners.clear();
    }
    if (now - this.checkedAt < this.changeCheckMs && now >= this.checkedAt) return;
    this.checkedAt = now;
    const external = this.store.keys.externalRevision();
    if (external !== this.seenExternal) {
      this.seenExternal = external;
      this.owners.clear();
    }
  }

  private touch(keyId: number, now: number): void {
    const last = this.lastWrite.get(keyId);
    if (last !== undefined && now - last < this.touchEveryMs) return;
    // Skipped while another process holds the write lock: tried again on a later request.
    if (this.store.keys.touch(keyId, now)) this.lastWrite.set(keyId, now);
  }
}
