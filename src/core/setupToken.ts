/**
 * The first admin without a default password: on a start with no admin the server makes a
 * one-time token, prints it in its log and keeps only its hash (in memory: a restart without an
 * admin prints a fresh one). /setup consumes it once to create the admin account.
 */
import { randomBase62 } from "./apiKeys";
import { sha256Hex, tokensEqual } from "./digest";

export class SetupToken {
  private hash: string | null = null;

  /** Issues a new token and returns it (to be logged once). */
  issue(): string {
    const token = randomBase62(32);
    this.hash = sha256Hex(token);
    return token;
  }

  get pending(): boolean {
    return this.hash !== null;
  }

  /** True exactly once for the right token; the token is then gone. */
  consume(token: string): boolean {
    if (this.hash === null || !tokensEqual(sha256Hex(token), this.hash)) return false;
    this.hash = null;
    return true;
  }

  /**
   * Takes the token for a setup attempt (so two concurrent attempts cannot both succeed);
   * `restore` puts it back if creating the admin then fails for a reason the user can fix.
   */
  take(token: string): string | null {
    const hash = this.hash;
    return this.consume(token) ? hash : null;
  }

  restore(hash: string): void {
    this.hash ??= hash;
  }
}
