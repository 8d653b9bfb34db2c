/**
 * Webhook signatures against the Standard Webhooks specification: the reference libraries'
 * published vector, and test/support/standardWebhooks.ts, a verifier written from the spec's
 * text (not from our signer).
 */
import { describe, expect, test } from "bun:test";
import { newWebhookSecret, signWebhook, webhookHeaders, webhookSigningKey } from "../../src/core/webhooksSignature";
import { verifyStandardWebhook } from "../support/standardWebhooks";

describe("Standard Webhooks signature", () => {
  test("the reference libraries' vector", () => {
    // standard-webhooks/standard-webhooks libraries/javascript/src/webhook.test.ts, "sign function works".
    const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    expect(signWebhook(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}')).toBe("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  });

  test("new secrets are whsec_ + base64 of 32 random bytes, each different", () => {
    const a = newWebhookSecret();
    const b = newWebhookSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(a.slice(6), "base64").length).toBe(32);
    expect(webhookSigningKey(a).length).toBe(32);
    expect(a).not.toBe(b);
  });

  test("headers verify with the independent verifier; any change to id, time, body or secret breaks it", () => {
    const secret = newWebhookSecret();
    const body = JSON.stringify({ type: "image.task.succeeded", data: { id: "req_1", note: "ünïcode ✓" } });
    const now = 1_767_225_600;
    const headers = webhookHeaders([secret], "msg_abc123", now, body);
    expect(Object.keys(headers).sort()).toEqual(["webhook-id", "webhook-signature", "webhook-timestamp"]);
    expect(headers["webhook-timestamp"]).toBe(String(now));
    expect(verifyStandardWebhook(secret, headers, body, now)).toBe(true);
    expect(verifyStandardWebhook(secret, headers, body, now + 299)).toBe(true);
    expect(verifyStandardWebhook(secret, headers, body, now + 301)).toBe(false);
    expect(verifyStandardWebhook(secret, headers, body + " ", now)).toBe(false);
    expect(verifyStandardWebhook(secret, { ...headers, "webhook-id": "msg_abc124" }, body, now)).toBe(false);
    expect(verifyStandardWebhook(secret, { ...headers, "webhook-timestamp": String(now + 1) }, body, now)).toBe(false);
    expect(verifyStandardWebhook(newWebhookSecret(), headers, body, now)).toBe(false);
    // A list with another entry first still verifies (rotation: the receiver tries each).
    expect(verifyStandardWebhook(secret, { ...headers, "webhook-signature": `v1,AAAA ${headers["webhook-signature"]}` }, body, now)).toBe(true);
  });

  test("with two secrets (a rotation's overlap) the header lists one entry per secret, in order, and either secret verifies", () => {
    const [fresh, previous, stranger] = [newWebhookSecret(), newWebhookSecret(), newWebhookSecret()];
    const body = '{"type":"webhook.test"}';
    const now = 1_767_225_600;
    const headers = webhookHeaders([fresh, previous], "msg_rotating", now, body);
    expect(headers["webhook-signature"]).toBe(`${signWebhook(fresh, "msg_rotating", now, body)} ${signWebhook(previous, "msg_rotating", now, body)}`);
    expect(headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]{43}= v1,[A-Za-z0-9+/]{43}=$/);
    expect(verifyStandardWebhook(fresh, headers, body, now)).toBe(true);
    expect(verifyStandardWebhook(previous, headers, body, now)).toBe(true);
    expect(verifyStandardWebhook(stranger, headers, body, now)).toBe(false);
    expect(webhookHeaders([fresh], "msg_rotating", now, body)["webhook-signature"]).toBe(signWebhook(fresh, "msg_rotating", now, body));
  });

  test("ids with a dot (the content delimiter) and non-integer timestamps are refused", () => {
    const secret = newWebhookSecret();
    expect(() => signWebhook(secret, "msg_a.b", 1, "{}")).toThrow();
    expect(() => signWebhook(secret, "evt_1", 1, "{}")).toThrow();
    expect(() => signWebhook(secret, "msg_1", 1.5, "{}")).toThrow();
    expect(() => webhookSigningKey("whsec_not base64!")).toThrow();
  });
});
