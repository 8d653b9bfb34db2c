/**
 * Workbench sessions: a random 256-bit id for the browser; storage keeps only its SHA-256 with
 * the user, a per-session CSRF token and an expiry. (How the id travels, as a cookie, is the
 * http layer's business: http/workbench/sessionCookies.ts.)
 */
import { randomBase62 } from "./apiKeys";
import type { UserRow } from "./store";
import { sha256Hex } from "./digest";
import type { Clock } from "./clock";

/** 43 base62 characters ≈ 256 bits; anything else presented as an id is not one of ours. */
const SESSION_ID_CHARS = 43;
const CSRF_TOKEN_CHARS = 32;

export interface SessionRow {
  id_hash: string;
  user_id: number;
  csrf_token: string;
  created_at: number;
  expires_at: number;
}

export interface SessionWithUser extends SessionRow {
  user: UserRow;
}

/** The port: what sessions need from storage (store/sessions.ts implements it). */
export interface SessionRecords {
  create(row: SessionRow): Promise<void>;
  /** The live session and its user; expired rows are not returned. */
  find(idHash: string, now: number): Promise<SessionWithUser | null>;
  delete(idHash: string): Promise<void>;
  deleteForUser(userId: number): Promise<void>;
  deleteExpired(now: number): Promise<number>;
}

export function hashSessionId(id: string): string {
  return sha256Hex(id);
}

export interface StartedSession {
  /** The secret the browser keeps; never stored. */
  id: string;
  csrf: string;
  ttlMs: number;
}

export class Sessions {
  constructor(
    private readonly records: SessionRecords,
    private readonly ttlMs: number,
    private readonly clock: Clock,
  ) {}

  async start(userId: number): Promise<StartedSession> {
    const id = randomBase62(SESSION_ID_CHARS);
    const csrf = randomBase62(CSRF_TOKEN_CHARS);
    const now = this.clock();
    await this.records.deleteExpired(now);
    await this.records.create({ id_hash: hashSessionId(id), user_id: userId, csrf_token: csrf, created_at: now, expires_at: now + this.ttlMs });
    return { id, csrf, ttlMs: this.ttlMs };
  }

  /** The live session of an id, or null (unknown, expired, or a disabled user). */
  async find(id: string): Promise<SessionWithUser | null> {
    if (id.length !== SESSION_ID_CHARS) return null;
    const found = await this.records.find(hashSessionId(id), this.clock());
    if (!found || found.user.disabled) return null;
    return found;
  }

  end(id: string): Promise<void> {
    return this.records.delete(hashSessionId(id));
  }

  /** Ends every session of a user (disabled by an admin, or a new password). */
  endAllFor(userId: number): Promise<void> {
    return this.records.deleteForUser(userId);
  }
}
