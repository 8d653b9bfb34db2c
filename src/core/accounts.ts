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

export async function createKey(store: AccountStore, clock: Clock, userId: number, name: string, limits?: KeyLimits): Promise<{ key: NewApiKey; row: ApiKeyRow }> {
  const key = generateApiKey();
  const row = await store.keys.create({ userId, name, prefix: key.prefix, secretHash: key.hash, ...(limits ? { limits } : {}) }, clock());
  return { key, row };
}

/** Longest a revocation made by another process (the CLI) or instance goes unseen by a running server. */
export const KEY_CHANGE_CHECK_MS = 100;
/** Key owners kept in memory; past it the cache starts over (a bound, not a working set). */
const MAX_CACHED_KEYS = 10_000;

/**
 * Finds who a presented key belongs to without a database lookup per request: owners found by
 * the key's hash stay in memory until something that could change them happens. A revocation,
 * a disabled user or a changed role in this process empties the cache at once (the store's
 * local revision); another process's or instance's writes (a CLI `key revoke`) move the
 * store's shared revision, read at most every KEY_CHANGE_CHECK_MS: the request that finds the
 * interval passed reads it (and requests arriving meanwhile wait for that one read), every
 * other request answers from memory. Unknown keys are never cached, so a new key works at once
 * and guessing cannot fill memory. last_used_at is written at most once a minute per key, off
 * the request's path.
 */
export class KeyAuthenticator {
  private readonly lastWrite = new Map<number, number>();
  private readonly owners = new Map<string, KeyOwner>();
  private seenLocal: number;
  /** The shared revision the cache was filled under; null until the first check. */
  private seenExternal: number | null = null;
  private checkedAt = Number.NEGATIVE_INFINITY;
  private checking: Promise<void> | null = null;

  constructor(
    private readonly store: AccountStore,
    private readonly clock: Clock,
    private readonly touchEveryMs = 60_000,
    private readonly changeCheckMs = KEY_CHANGE_CHECK_MS,
  ) {
    this.seenLocal = store.keys.localRevision();
  }

  /**
   * The key's owner, or null for an unknown key. Answered synchronously from memory when the
   * owner is cached and no change check is due (nearly every request): no promise to settle.
   */
  lookup(secret: string): KeyOwner | null | Promise<KeyOwner | null> {
    const now = this.clock();
    const check = this.dropIfChanged(now);
    const hash = hashApiKey(secret);
    if (!check) {
      const owner = this.owners.get(hash);
      if (owner) return this.seen(owner, now);
    }
    return this.lookupAfter(check, hash, now);
  }

  private async lookupAfter(check: Promise<void> | null, hash: string, now: number): Promise<KeyOwner | null> {
    if (check) await check;
    let owner = this.owners.get(hash) ?? null;
    if (!owner) {
      // The revision before the read: a change committed while it runs moves it past this and
      // empties the cache at the next check, so a stale owner cannot outlive one interval.
      const filledUnder = this.seenLocal;
      owner = await this.store.keys.ownerByHash(hash);
      if (owner && filledUnder === this.store.keys.localRevision()) {
        if (this.owners.size >= MAX_CACHED_KEYS) this.owners.clear();
        this.owners.set(hash, owner);
      }
    }
    return owner && this.seen(owner, now);
  }

  /** A usable key's use is noted (last_used_at, throttled); the owner is returned as found. */
  private seen(owner: KeyOwner, now: number): KeyOwner {
    if (owner.key_revoked_at === null && !owner.disabled && !this.expired(owner)) this.touch(owner.key_id, now);
    return owner;
  }

  /** The key's expiry has passed (by this authenticator's clock). */
  expired(owner: KeyOwner): boolean {
    return isKeyExpired({ expiresAt: owner.key_expires_at }, this.clock());
  }

  /** Empties the cache if a revision moved; a promise only when the shared one must be read now. */
  private dropIfChanged(now: number): Promise<void> | null {
    const local = this.store.keys.localRevision();
    if (local !== this.seenLocal) {
      this.seenLocal = local;
      this.owners.clear();
    }
    if (this.checking) return this.checking;
    if (now - this.checkedAt < this.changeCheckMs && now >= this.checkedAt) return null;
    this.checkedAt = now;
    this.checking = this.checkShared().finally(() => {
      this.checking = null;
    });
    return this.checking;
  }

  private async checkShared(): Promise<void> {
    let shared: number;
    try {
      shared = await this.store.keys.externalRevision();
    } catch (e) {
      // Unconfirmed: forget the owners and read again on the next request.
      this.owners.clear();
      this.checkedAt = Number.NEGATIVE_INFINITY;
      throw e;
    }
    if (shared !== this.seenExternal) {
      this.seenExternal = shared;
      this.owners.clear();
    }
  }

  /** Off the request's path; skipped (and tried again on a later request) when the store was locked or failed. */
  private touch(keyId: number, now: number): void {
    const last = this.lastWrite.get(keyId);
    if (last !== undefined && now - last < this.touchEveryMs) return;
    this.lastWrite.set(keyId, now);
    const forget = () => {
      if (this.lastWrite.get(keyId) === now) this.lastWrite.delete(keyId);
    };
    this.store.keys.touch(keyId, now).then((written) => {
      if (!written) forget();
    }, forget);
  }
}
