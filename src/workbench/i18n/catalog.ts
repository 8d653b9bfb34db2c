/**
 * Every workbench message, merged from one file per area under messages/ (each defines English
 * and Chinese side by side). A new page adds its own area file here (one line in each list, so
 * concurrent additions merge); keys start with the area's name, and client scripts' messages
 * with `client.<script>.`.
 */
import { admin } from "./messages/admin";
import { auth } from "./messages/auth";
import { codes } from "./messages/codes";
import { common } from "./messages/common";
import { gallery } from "./messages/gallery";
import { history } from "./messages/history";
import { keys } from "./messages/keys";
import { operators } from "./messages/operators";
import { playground } from "./messages/playground";
import { requestDetail } from "./messages/requestDetail";
import { usage } from "./messages/usage";
import { webhooks } from "./messages/webhooks";

const AREAS = [
  common,
  auth,
  keys,
  gallery,
  history,
  admin,
  codes,
  operators,
  usage,
  requestDetail,
  playground,
  webhooks,
] as const;

export const EN = {
  ...common.en,
  ...auth.en,
  ...keys.en,
  ...gallery.en,
  ...history.en,
  ...admin.en,
  ...codes.en,
  ...operators.en,
  ...usage.en,
  ...requestDetail.en,
  ...playground.en,
  ...webhooks.en,
};
export type MessageKey = keyof typeof EN;
export const ZH: Record<MessageKey, string> = {
  ...common.zh,
  ...auth.zh,
  ...keys.zh,
  ...gallery.zh,
  ...history.zh,
  ...admin.zh,
  ...codes.zh,
  ...operators.zh,
  ...usage.zh,
  ...requestDetail.zh,
  ...playground.zh,
  ...webhooks.zh,
};

/** Each area's keys, for the test that no two areas define the same key. */
export const AREA_KEYS: string[][] = AREAS.map((a) => Object.keys(a.en));
