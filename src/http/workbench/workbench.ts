/** Everything the workbench routes share: session cookies and sign-in (with the setup token). Built once per app. */
import type { Config } from "../../config";
import { Sessions } from "../../core/sessions";
import { SetupToken } from "../../core/setupToken";
import { SignIn } from "../../core/signIn";
import { RedemptionCodes } from "../../core/redemptionCodes";
import type { Logger } from "../../logger";
import type { Store } from "../../store";
import { SessionCookies } from "./sessionCookies";
import type { Clock } from "../../core/clock";
import { DEFAULT_LIMITS } from "../../core/signIn";
import { DEFAULT_REDEEM_LIMITS } from "../../core/redemptionCodes";
import type { AttemptCounters } from "../../core/attemptLimiter";

export interface Workbench {
  sessions: SessionCookies;
  signIn: SignIn;
  /** Redemption codes: batches (admin) and redeeming them (throttled like sign-in). */
  codes: RedemptionCodes;
  /**
   * The start's setup check: when no admin exists, the one-time setup token is issued and logged.
   * The server awaits it before listening; the setup routes await it before asking about setup.
   */
  ready: Promise<void>;
}

export function createWorkbench(deps: {
  config: Config;
  store: Store;
  clock: Clock;
  logger: Logger;
  /** Where sign-in and redemption attempts are counted: memory by default, Redis with [redis] url (services.ts). */
  attemptCounters?: AttemptCounters;
}): Workbench {
  const { config, store, clock, logger, attemptCounters } = deps;
  const setup = new SetupToken();
  const ready = config.workbench.enabled ? offerSetupIfNoAdmin(store, setup, logger) : Promise.resolve();
  // Awaited by the server (which fails to start on an error); marked handled for apps that never ask.
  ready.catch(() => {});
  const wb = config.workbench;
  return {
    ready,
    sessions: new SessionCookies(new Sessions(store.sessions, wb.session_ttl_hours * 3_600_000, clock), config),
    signIn: new SignIn(store, { minPasswordLength: wb.min_password_length, initialCredits: wb.initial_credits }, setup, clock, DEFAULT_LIMITS, attemptCounters),
    codes: new RedemptionCodes(store.redemptions, clock, DEFAULT_REDEEM_LIMITS, attemptCounters),
  };
}

async function offerSetupIfNoAdmin(store: Store, setup: SetupToken, logger: Logger): Promise<void> {
  if ((await store.users.countAdmins()) > 0) return;
  const token = setup.issue();
  logger.warn("no admin account yet: open /setup in the workbench and enter this one-time setup token (or run `atelier user add --admin`)", {
    setup_token: token,
  });
}
