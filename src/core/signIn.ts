/**
 * Sign-in, sign-up and the first admin's setup for the workbench.
 *
 * Sign-in answers the same way for an unknown email and a wrong password (and spends the same
 * hashing time), and is throttled per account and per client address. Sign-ups and setup-token
 * guesses share one budget per address. Each attempt is taken from its counters before it is
 * judged (attemptLimiter.ts: concurrent guesses cannot all pass a check made before any counts),
 * and given back when it turns out not to count. Setup is open while the one-time token is
 * pending and no admin exists (an admin made with the CLI closes it too).
 */
import { AccountError, addUser, hashPassword, normalizeEmail, validateEmail, verifyPassword } from "./accounts";
import { giveBackAttempt, memoryAttemptCounters, takeAttempt, type AttemptCounter, type AttemptCounters } from "./attemptLimiter";
import type { SetupToken } from "./setupToken";
import { EmailTakenError, type AccountStore, type UserRow } from "./store";
import { MAX_EMAIL_CHARS } from "./limits";
import type { Clock } from "./clock";

/** What sign-in needs from storage besides creating users. */
export interface SignInStore extends AccountStore {
  users: AccountStore["users"] & { byEmail(email: string): Promise<UserRow | null>; countAdmins(): Promise<number> };
}

export interface SignInRules {
  /** From config ([workbench] min_password_length), the one owner of this rule. */
  minPasswordLength: number;
  /** Credits a new account starts with ([workbench] initial_credits). */
  initialCredits: number;
}

export type SignInResult =
  | { ok: true; user: UserRow }
  | { ok: false; reason: "invalid" }
  /** Only after the right password: it tells nothing to someone who does not know it. */
  | { ok: false; reason: "disabled" }
  | { ok: false; reason: "throttled"; retryAfterMs: number };

/**
 * What was wrong with a sign-up or setup, as a code the workbench words in the page's language
 * (`message` is the same in English, for everything else).
 */
export type AccountProblem =
  | "email_invalid"
  | "password_too_short"
  | "password_too_long"
  | "signup_refused"
  | "email_taken"
  | "account_invalid"
  | "setup_closed"
  | "setup_throttled"
  | "setup_wrong_token";

export type SignUpResult =
  | { ok: true; user: UserRow }
  | { ok: false; reason: "throttled"; retryAfterMs: number }
  | { ok: false; reason: "invalid"; problem: AccountProblem; message: string; field: "email" | "password" | null };

export type SetupResult =
  | { ok: true; user: UserRow }
  /** "closed": an admin exists or the token was used; "wrong_token": not this start's token. */
  | { ok: false; reason: "closed" | "throttled" | "wrong_token" | "invalid"; problem: AccountProblem; message: string };

export interface AttemptLimits {
  windowMs: number;
  perAccount: number;
  perAddress: number;
  signUpsPerAddress: number;
}

export const DEFAULT_LIMITS: AttemptLimits = { windowMs: 15 * 60_000, perAccount: 5, perAddress: 30, signUpsPerAddress: 20 };

export const MAX_PASSWORD_CHARS = 1024;

export class SignIn {
  private readonly perAccount: AttemptCounter;
  private readonly perAddress: AttemptCounter;
  private readonly signUpsPerAddress: AttemptCounter;
  /** Verified against when the email is unknown, so both failures cost the same time. */
  private dummyHash: Promise<string> | undefined;

  constructor(
    private readonly store: SignInStore,
    private readonly rules: SignInRules,
    private readonly setup: SetupToken,
    private readonly clock: Clock,
    limits: AttemptLimits = DEFAULT_LIMITS,
    /** Where attempts are counted: this process's memory, or Redis shared by every instance ([redis] url). */
    counters: AttemptCounters = memoryAttemptCounters(clock),
  ) {
    this.perAccount = counters("signin:account", limits.perAccount, limits.windowMs);
    this.perAddress = counters("signin:address", limits.perAddress, limits.windowMs);
    this.signUpsPerAddress = counters("signup:address", limits.signUpsPerAddress, limits.windowMs);
  }

  async withPassword(emailInput: string, password: string, address: string): Promise<SignInResult> {
    const account = normalizeEmail(emailInput).toLowerCase();
    // Every attempt counts, per account and per address, taken before the password is checked; a
    // success resets the account's count and gives the address its attempt back: the address's
    // budget is for failures, else the users behind one proxy or NAT (one address to us) locked
    // each other out by signing in.
    const wait = await takeAttempt([[this.perAccount, account], [this.perAddress, address]]);
    if (wait > 0) return { ok: false, reason: "throttled", retryAfterMs: wait };
    const user = account.length <= MAX_EMAIL_CHARS ? await this.store.users.byEmail(account) : null;
    this.dummyHash ??= hashPassword(crypto.randomUUID());
    const valid = await verifyPassword(password, user?.password_hash ?? (await this.dummyHash));
    if (!user || !valid) return { ok: false, reason: "invalid" };
    if (user.disabled) return { ok: false, reason: "disabled" };
    await this.perAccount.reset(account);
    await giveBackAttempt([[this.perAddress, address]]);
    return { ok: true, user };
  }

  async signUp(emailInput: string, password: string, address: string): Promise<SignUpResult> {
    // Sign-ups the form lets through count (taken up front, so the throttle answers first); a form
    // refused for its own problems gives its attempt back.
    const attempt = [[this.signUpsPerAddress, address]] as const;
    const wait = await takeAttempt(attempt);
    if (wait > 0) return { ok: false, reason: "throttled", retryAfterMs: wait };
    const email = normalizeEmail(emailInput);
    const problem = validateEmail(email);
    const weak = problem ? null : this.passwordProblem(password);
    if (problem || weak) await giveBackAttempt(attempt);
    if (problem) return { ok: false, reason: "invalid", problem: "email_invalid", message: `Email ${problem}.`, field: "email" };
    if (weak) return { ok: false, reason: "invalid", ...weak, field: "password" };
    try {
      const user = await addUser(this.store, this.clock, { email, password, credits: this.rules.initialCredits, actor: "signup" });
      return { ok: true, user };
    } catch (e) {
      // Said generically: this page must not confirm which emails have accounts.
      if (e instanceof EmailTakenError) {
        return { ok: false, reason: "invalid", problem: "signup_refused", message: "We could not create an account with these details. If you already have one, sign in instead.", field: null };
      }
      if (e instanceof AccountError) return { ok: false, reason: "invalid", problem: "account_invalid", message: e.message, field: null };
      throw e;
    }
  }

  /** Setup is open while this start's token is pending and no admin exists (one read, only while pending). */
  async setupOpen(): Promise<boolean> {
    return this.setup.pending && (await this.store.users.countAdmins()) === 0;
  }

  /** Creates the first admin with this start's setup token; the token works once. */
  async setUpFirstAdmin(token: string, email: string, password: string, address: string): Promise<SetupResult> {
    if (!(await this.setupOpen())) return { ok: false, reason: "closed", problem: "setup_closed", message: "Setup is already complete." };
    // Guessing the token is throttled like sign-ups: only wrong tokens count, so an attempt is
    // taken before the token is tried and given back unless the token was wrong.
    const attempt = [[this.signUpsPerAddress, `setup:${address}`]] as const;
    if ((await takeAttempt(attempt)) > 0) return { ok: false, reason: "throttled", problem: "setup_throttled", message: "Too many attempts. Try again later." };
    const weak = this.passwordProblem(password);
    if (weak) {
      await giveBackAttempt(attempt);
      return { ok: false, reason: "invalid", ...weak };
    }
    // Taken, not just checked, so that two concurrent attempts cannot both succeed.
    const taken = this.setup.take(token);
    if (taken === null) return { ok: false, reason: "wrong_token", problem: "setup_wrong_token", message: "That setup token is not valid. Copy it from the server log of this start." };
    await giveBackAttempt(attempt);
    try {
      const user = await addUser(this.store, this.clock, { email, password, role: "admin", credits: this.rules.initialCredits, actor: "setup" });
      return { ok: true, user };
    } catch (e) {
      // A mistake the user can fix: the token stays valid for the next try.
      this.setup.restore(taken);
      if (e instanceof AccountError) {
        const problem: AccountProblem = /^email/.test(e.message) ? "email_invalid" : "account_invalid";
        return { ok: false, reason: "invalid", problem, message: e.message.replace(/^email/, "Email") + "." };
      }
      if (e instanceof EmailTakenError) {
        return { ok: false, reason: "invalid", problem: "email_taken", message: "That email already has an account; choose another or make it admin with the CLI." };
      }
      throw e;
    }
  }

  /**
   * One password rule for sign-up, setup and the admin's "create user" and "reset password":
   * the length from config, and a cap on what is hashed.
   */
  passwordProblem(password: string): { problem: AccountProblem; message: string } | null {
    const min = this.rules.minPasswordLength;
    if (password.length < min) return { problem: "password_too_short", message: `Password must be at least ${min} characters.` };
    if (password.length > MAX_PASSWORD_CHARS) return { problem: "password_too_long", message: `Password must be at most ${MAX_PASSWORD_CHARS} characters.` };
    return null;
  }
}
