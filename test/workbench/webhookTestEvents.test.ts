/** POST /webhooks/test past the bound on pending test events: the form answers with why, in the viewer's language. */
import { afterEach, expect, test } from "bun:test";
import { MAX_PENDING_TESTS } from "../../src/core/webhooksFairness";
import { workbenchApp } from "../support/workbenchApp";

let close: (() => void) | undefined;
afterEach(() => close?.());

test(`after ${MAX_PENDING_TESTS} pending test events a further one is refused with a message (English and Chinese)`, async () => {
  const wb = workbenchApp();
  close = wb.close;
  const me = await wb.session("tests@example.test");
  // Straight into the store (the form would also make a secret, in a key file under data/); the
  // worker is not running, so the test events stay pending.
  await wb.store.webhooks.setEndpointUrl(me.id, "https://93.184.215.14/hook", Date.now());
  for (let i = 0; i < MAX_PENDING_TESTS; i++) expect((await me.post("/webhooks/test", {})).status).toBe(303);
  const refused = await me.post("/webhooks/test", {});
  expect(refused.status).toBe(429);
  expect(await refused.text()).toContain(`${MAX_PENDING_TESTS} test events are still waiting to be delivered`);
  const zh = await me.post("/webhooks/test", {}, { "accept-language": "zh-CN,zh;q=0.9" });
  expect(zh.status).toBe(429);
  expect(await zh.text()).toContain(`仍有 ${MAX_PENDING_TESTS} 个测试事件等待投递`);
  expect((await wb.store.webhooks.recentDeliveries(me.id, 10)).length).toBe(MAX_PENDING_TESTS);
});
