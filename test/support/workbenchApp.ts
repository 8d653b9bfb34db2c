/**
 * The workbench in-process (app.handle, the real store in an in-memory database), with helpers
 * to post its forms and to sign users in the way a browser does (session cookie + CSRF token).
 * Call `close()` after each test (afterEach).
 */
import { createApp } from "../../src/app";
import { createServices } from "../../src/services";
import { loadConfig } from "../../src/config";
import { addUser } from "../../src/core/accounts";
import { createLogger } from "../../src/logger";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";

export const WORKBENCH_BASE = "http://wb.test";
export const WORKBENCH_PASSWORD = "long enough password";

export function workbenchApp() {
  const config = loadConfig({ env: {} });
  config.workbench.initial_credits = 0;
  const store = createStore(openDatabase(":memory:"), latestVersion());
  const logs: string[] = [];
  const services = createServices({ config, store, logger: createLogger((l) => logs.push(l)), clock: Date.now });
  const app = createApp(services);
  const handle = (path: string, init: RequestInit = {}) => app.handle(new Request(`${WORKBENCH_BASE}${path}`, init));
  /** A same-origin form POST, as the browser sends it. */
  const form = (path: string, fields: Record<string, string>, headers: Record<string, string> = {}) =>
    handle(path, { method: "POST", headers: { origin: WORKBENCH_BASE, "content-type": "application/x-www-form-urlencoded", ...headers }, body: new URLSearchParams(fields) });
  /** The session cookie of a successful sign-in, or null when it was refused. */
  const signIn = async (email: string, password = WORKBENCH_PASSWORD) => {
    const res = await form("/signin", { email, password });
    return res.status === 303 ? res.headers.get("set-cookie")!.split(";")[0]! : null;
  };
  /** A new user, signed in: their cookie, CSRF token and id, and GET/POST as them. */
  const session = async (email: string, role: "user" | "admin" = "user") => {
    await addUser(store, Date.now, { email, password: WORKBENCH_PASSWORD, role });
    const cookie = (await signIn(email))!;
    const csrf = /name="csrf-token" content="([^"]+)"/.exec(await (await handle("/credits", { headers: { cookie } })).text())![1]!;
    const id = (await store.users.byEmail(email))!.id;
    return {
      cookie,
      csrf,
      id,
      get: (path: string) => handle(path, { headers: { cookie } }),
      post: (path: string, fields: Record<string, string>, headers: Record<string, string> = {}) => form(path, { _csrf: csrf, ...fields }, { cookie, ...headers }),
    };
  };
  return { services, store, logs, handle, form, signIn, session, close: () => store.close() };
}
