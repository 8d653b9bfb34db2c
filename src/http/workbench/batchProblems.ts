/** A refused redemption-code batch (core/redemptionCodes' BatchProblem) in the page's language. */
import { MAX_CODE_BATCH_NAME_CHARS, MAX_CODE_BATCH_SIZE, MAX_CODE_EXPIRY_DAYS, MAX_CREDIT_GRANT } from "../../core/limits";
import type { BatchProblem } from "../../core/redemptionCodes";
import type { Translator } from "../../workbench/i18n";

const BOUND: Record<BatchProblem, number> = {
  name: MAX_CODE_BATCH_NAME_CHARS,
  credits: MAX_CREDIT_GRANT,
  count: MAX_CODE_BATCH_SIZE,
  expiry: MAX_CODE_EXPIRY_DAYS,
};

export function batchProblemText(t: Translator, problem: BatchProblem): string {
  return t(`codes.problem.${problem}`, { max: BOUND[problem] });
}
