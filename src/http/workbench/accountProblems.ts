/** A sign-up, setup or password problem (core/signIn's AccountProblem) in the page's language. */
import { MAX_PASSWORD_CHARS, type AccountProblem } from "../../core/signIn";
import type { Translator } from "../../workbench/i18n";

export function accountProblemText(t: Translator, problem: AccountProblem, minPasswordLength: number): string {
  if (problem === "password_too_short") return t("auth.problem.password_too_short", { count: minPasswordLength });
  if (problem === "password_too_long") return t("auth.problem.password_too_long", { count: MAX_PASSWORD_CHARS });
  return t(`auth.problem.${problem}`);
}
