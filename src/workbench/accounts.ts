/**
 * Sign-up and sign-in for the workbench. Sign-in answers the same way for an unknown email and a
 * wrong password (and spends the same hashing time), and is throttled per account and per
 * client address.
 */
import type { Config } from "../config";
import { AccountError, addUser, hashPassword, normalizeEmail, validateEmail, verifyPassword, type Clock } from "../core/accounts";
import type { Store } from "../store";
import { EmailTakenError, type UserRow } from "../store/users";
import { AttemptLimiter } from "./rateLimit";

export type SignInResult =
  | { ok: true; user: UserRow }
  | { ok: false; reason: "invalid" }
  /** Only after the right password: it tells nothing to someone who does not know it. */
  | { ok: false; reason: "disabled" }
  | { ok: false; reason: "throttled"; retryAfterMs: number };

export type SignUpResult = { ok: true; user: UserRow } | { ok: false; message: string; field: "email" | "password" | null };

export interface AttemptLimits {
  windowMs: number;
  perAccount: number;
  perAddress: number;
  signUpsPerAddress: number;
}

export const DEFAULT_LIMITS: AttemptLimits = { windowMs: 15 * 60_000, perAccount: 5, perAddress: 30, signUpsPerAddress: 20 };

export class WorkbenchAccounts {
  private readonly perAccount: AttemptLimiter;
  private readonly perAddress: AttemptLimiter;
  private readonly signUpsPerAddress: AttemptLimiter;
  /** Verified against when the email is unknown, so both failures cost the same time. */
  private dummyHash: Promise<string> | undefined;

  constructor(
    private readonly store: Store,
    private readonly config: Config,
    private readonly clock: Clock,
    limits: AttemptLimits = DEFAULT_LIMITS,
  ) {
    this.perAccount = new AttemptLimiter(limits.perAccount, limits.windowMs, clock);
    this.perAddress = new AttemptLimiter(limits.perAddress, limits.windowMs, clock);
    this.signUpsPerAddress = new AttemptLimiter(limits.signUpsPerAddress, limits.windowMs, clock);
  }

  async signIn(emailInput: string, password: string, address: string): Promise<SignInResult> {
    const account = normalizeEmail(emailInput).toLowerCase();
    const wait = Math.max(this.perAccount.retryAfterMs(account), this.perAddress.retryAfterMs(address));
    if (wait > 0) return { ok: false, reason: "throttled", retryAfterMs: wait };
    this.perAccount.record(account);
    this.perAddress.record(address);
    const user = account.length <= 254 ? this.store.users.byEmail(account) : null;
    this.dummyHash ??= hashPassword(crypto.randomUUID());
    const valid = await verifyPassword(password, user?.password_hash ?? (await this.dummyHash));
    if (!user || !valid) return { ok: false, reason: "invalid" };
    if (user.disabled) return { ok: false, reason: "disabled" };
    this.perAccount.reset(account);
    return { ok: true, user };
  }

  /** Counts a wrong setup token against the same per-address budget as sign-ups. */
  noteSetupAttempt(key: string): void {
    this.signUpsPerAddress.record(key);
  }

  signUpRetryAfterMs(address: string): number {
    return this.signUpsPerAddress.retryAfterMs(address);
  }

  async signUp(emailInput: string, password: string, address: string): Promise<SignUpResult> {
    const email = normalizeEmail(emailInput);
    const problem = validateEmail(email);
    if (problem) return { ok: false, message: `Email ${problem}.`, field: "email" };
    const min = this.config.workbench.min_password_length;
    if (password.length < min) return { ok: false, message: `Password must be at least ${min} characters.`, field: "password" };
    if (password.length > 1024) return { ok: false, message: "Password must be at most 1024 characters.", field: "password" };
    this.signUpsPerAddress.record(address);
    try {
      const user = await addUser(this.store, this.clock, {
        email,
        password,
        credits: this.config.workbench.initial_credits,
        actor: "signup",
      });
      return { ok: true, user };
    } catch (e) {
      // Said generically: this page must not confirm which emails have accounts.
      if (e instanceof EmailTakenError) return { ok: false, message: "We could not create an account with these details. If you already have one, sign in instead.", field: null };
      if (e instanceof AccountError) return { ok: false, message: e.message, field: null };
      throw e;
    }
  }
}
