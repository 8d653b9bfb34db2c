/** Everything the workbench routes share: sessions, sign-in, the setup token. Built once per app. */
import type { Config } from "../config";
import type { Clock } from "../core/accounts";
import type { Logger } from "../logger";
import type { Store } from "../store";
import { SessionStore } from "../store/sessions";
import { WorkbenchAccounts } from "./accounts";
import { SessionManager } from "./sessions";
import { SetupToken } from "./setupToken";

export interface Workbench {
  sessions: SessionManager;
  accounts: WorkbenchAccounts;
  setup: SetupToken;
}

export function createWorkbench(deps: { config: Config; store: Store; clock: Clock; logger: Logger }): Workbench {
  const { config, store, clock, logger } = deps;
  const setup = new SetupToken();
  if (config.workbench.enabled && store.users.countAdmins() === 0) {
    const token = setup.issue();
    logger.warn("no admin account yet: open /setup in the workbench and enter this one-time setup token (or run `atelier user add --admin`)", {
      setup_token: token,
    });
  }
  return {
    sessions: new SessionManager(new SessionStore(store.db), config, clock),
    accounts: new WorkbenchAccounts(store, config, clock),
    setup,
  };
}
