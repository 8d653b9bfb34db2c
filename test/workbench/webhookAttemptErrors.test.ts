/**
 * The deliveries table words a stored attempt error in the page's language: every text core
 * writes (webhooksDelivery, webhooks, store/webhooks) classifies back to its category, and the
 * Chinese page shows the category in Chinese with raw technical detail only as code.
 */
import { describe, expect, test } from "bun:test";
import { attemptErrorText, classifyAttemptError, ENDPOINT_REMOVED, NO_SECRET, SECRET_UNREADABLE } from "../../src/core/webhooksAttemptError";
import type { DeliveryView } from "../../src/core/webhooksEndpoints";
import { translator } from "../../src/workbench/i18n";
import { webhooksPage } from "../../src/workbench/pages/webhooks";

const refusedSentence = "Webhooks may only go to public addresses: 127.0.0.1 is a loopback address.";
const stored = {
  redirect: attemptErrorText.redirect(302, "http://example.com/elsewhere"),
  status: attemptErrorText.status(500, "Internal Server Error"),
  timeout: attemptErrorText.timeout(10000),
  refused: attemptErrorText.connection("ECONNREFUSED", "Unable to connect. Is the computer able to access the url?"),
  connection: attemptErrorText.connection("ECONNRESET", "The socket connection was closed unexpectedly"),
  notSent: attemptErrorText.notSent(refusedSentence),
};

describe("classifyAttemptError", () => {
  test("every stored text comes back as its category and parameters", () => {
    expect(classifyAttemptError(stored.redirect)).toEqual({ kind: "redirect", status: 302, detail: "http://example.com/elsewhere" });
    expect(classifyAttemptError(attemptErrorText.redirect(307, null))).toEqual({ kind: "redirect", status: 307, detail: null });
    expect(classifyAttemptError(stored.status)).toEqual({ kind: "status", status: 500, detail: "Internal Server Error" });
    expect(classifyAttemptError(attemptErrorText.status(404, ""))).toEqual({ kind: "status", status: 404, detail: null });
    expect(classifyAttemptError(stored.timeout)).toEqual({ kind: "timeout", ms: 10000 });
    expect(classifyAttemptError(stored.refused)).toEqual({ kind: "refused_connection", detail: "Unable to connect. Is the computer able to access the url?" });
    expect(classifyAttemptError(stored.connection)).toEqual({ kind: "connection", detail: "ECONNRESET: The socket connection was closed unexpectedly" });
    expect(classifyAttemptError(attemptErrorText.connection(undefined, "boom"))).toEqual({ kind: "connection", detail: "boom" });
    expect(classifyAttemptError(stored.notSent)).toEqual({ kind: "not_sent", detail: refusedSentence });
    expect(classifyAttemptError(ENDPOINT_REMOVED)).toEqual({ kind: "endpoint_removed" });
    expect(classifyAttemptError(SECRET_UNREADABLE)).toEqual({ kind: "secret_unreadable" });
    expect(classifyAttemptError(NO_SECRET)).toEqual({ kind: "no_secret" });
    expect(classifyAttemptError("something new")).toEqual({ kind: "other", detail: "something new" });
  });
});

function view(id: number, lastError: string, attemptErrors: (string | null)[]): DeliveryView {
  return {
    delivery: {
      id, event_id: `msg_${id}`, user_id: 1, event_type: "image.task.failed", source: "endpoint", url: "https://hooks.example.com/in",
      payload: "{}", state: "failed", attempts: attemptErrors.length, next_attempt_at: null, last_status: null, last_error: lastError, created_at: 0, finished_at: 1,
    },
    attempts: attemptErrors.map((error, i) => ({ id: id * 10 + i, delivery_id: id, attempted_at: i, status: error?.startsWith("HTTP") ? Number(error.slice(5, 8)) : null, error, duration_ms: 5 })),
  };
}

function render(locale: "en" | "zh-CN"): string {
  const viewer = { user: { id: 1, email: "a@b.c", password_hash: null, role: "user" as const, credits: 0, disabled: 0, created_at: 0 }, csrf: "t", t: translator(locale) };
  const deliveries = [
    view(1, stored.timeout, [stored.redirect, stored.status, stored.timeout]),
    view(2, stored.connection, [stored.refused, stored.connection]),
    view(3, stored.notSent, [stored.notSent]),
    view(4, ENDPOINT_REMOVED, []),
    view(5, NO_SECRET, [SECRET_UNREADABLE, NO_SECRET]),
  ];
  return webhooksPage(viewer, { endpoint: { url: null, secretCreatedAt: null, previousSecretExpiresAt: null }, deliveries, schedule: { attempts: 8, spanMs: 3_600_000 }, rotationOverlapMs: 86_400_000 }).value;
}

describe("the deliveries table", () => {
  test("in Chinese: each category in Chinese, no English sentence outside code", () => {
    const page = render("zh-CN");
    for (const words of ["HTTP 302：不跟随重定向，请填写最终 URL", "HTTP 500：", "10000 毫秒内无应答", "连接被拒绝", "连接失败", "未发送：该 URL 现在被拒绝", "端点已被移除", "无法用本服务器的密钥打开签名密钥", "没有签名密钥"]) {
      expect([words, page.includes(words)]).toEqual([words, true]);
    }
    const outsideCode = page.replace(/<script[\s\S]*?<\/script>/g, " ").replace(/<code[^>]*>[\s\S]*?<\/code>/g, " ").replace(/<[^>]*>/g, "\n");
    for (const english of ["no answer", "redirects are not followed", "connection failed", "not sent", "endpoint was removed", "signing secret", "public addresses", "Internal Server Error"]) {
      expect([english, outsideCode.includes(english)]).toEqual([english, false]);
    }
    // The raw detail stays, as code.
    expect(page).toContain('<code class="muted">Internal Server Error</code>');
    expect(page).toContain(`<code class="muted">${refusedSentence}</code>`);
  });

  test("in English: the stored wording", () => {
    const page = render("en");
    for (const words of ["HTTP 302: redirects are not followed; set the final URL", "no answer within 10000 ms", "HTTP 500: <code class=\"muted\">Internal Server Error</code>", "connection refused", "connection failed", "the endpoint was removed", NO_SECRET]) {
      expect([words, page.includes(words)]).toEqual([words, true]);
    }
  });
});
