/** The webhooks page: set or remove the endpoint, create or rotate the secret (shown once; with or without overlap), send a test event, see deliveries. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { totalAttempts } from "../../core/webhooksSchedule";
import { MAX_PENDING_TESTS } from "../../core/webhooksFairness";
import { webhooksPage, type WebhooksPageState } from "../../workbench/pages/webhooks";
import type { Viewer } from "../../workbench/layout";
import type { MessageKey } from "../../workbench/i18n";
import { workbenchGuards } from "./guards";
import { webhookUrlProblemText } from "./webhookProblems";
import { formFields, htmlResponse, redirect } from "./respond";

const hide = { detail: { hide: true } };

/** Deliveries the page lists, newest first. */
const RECENT_DELIVERIES = 25;

const NOTICES: Record<string, Extract<MessageKey, `webhooks.notice.${string}`>> = {
  saved: "webhooks.notice.saved",
  removed: "webhooks.notice.removed",
  sent: "webhooks.notice.sent",
};

export function webhooksRoutes(services: Services) {
  const webhooks = services.taskEvents;
  const delays = services.config.webhooks.retry_delays_ms;
  const schedule = { attempts: totalAttempts(delays), spanMs: delays.reduce((a, b) => a + b, 0) };
  const rotationOverlapMs = services.config.webhooks.rotation_overlap_s * 1000;
  const render = async (viewer: Viewer, extra: Partial<WebhooksPageState> = {}, status = 200) =>
    htmlResponse(
      webhooksPage(viewer, {
        endpoint: await webhooks.endpoints.view(viewer.user.id),
        deliveries: await webhooks.endpoints.deliveries(viewer.user.id, RECENT_DELIVERIES),
        schedule,
        rotationOverlapMs,
        ...extra,
      }),
      status,
    );

  return new Elysia({ name: "workbench.webhooks" })
    .use(workbenchGuards(services))
    .get("/webhooks", ({ viewer, query }) => render(viewer, { notice: NOTICES[String(query.done)] ? viewer.t(NOTICES[String(query.done)]!) : null }), { viewer: true, ...hide })
    .post("/webhooks/endpoint", async ({ viewer, body }) => {
      const typed = (formFields(body).url ?? "").trim();
      if (typed === "") return render(viewer, { error: viewer.t("webhooks.error.noUrl") }, 400);
      const saved = await webhooks.endpoints.setUrl(viewer.user.id, typed);
      if (saved.reason !== undefined) return render(viewer, { error: webhookUrlProblemText(viewer.t, saved.reason), typedUrl: typed }, 400);
      // The first endpoint also made the first secret: it exists only in this response.
      if (saved.secret) return render(viewer, { secret: saved.secret, notice: viewer.t("webhooks.notice.saved") }, 201);
      return redirect("/webhooks?done=saved");
    }, { viewer: true, ...hide })
    .post("/webhooks/endpoint/remove", async ({ viewer }) => {
      await webhooks.endpoints.clear(viewer.user.id);
      return redirect("/webhooks?done=removed");
    }, { viewer: true, ...hide })
    .post("/webhooks/secret", async ({ viewer, body }) => {
      // overlap=none: the current secret stops at once (it leaked); otherwise it stays valid for the overlap.
      const secret = await webhooks.endpoints.rotateSecret(viewer.user.id, { keepPrevious: formFields(body).overlap !== "none" });
      return render(viewer, { secret }, 201);
    }, { viewer: true, ...hide })
    .post("/webhooks/test", async ({ viewer }) => {
      const refused = await webhooks.sendTestEvent(viewer.user.id);
      if (refused === "no_endpoint") return render(viewer, { error: viewer.t("webhooks.error.noEndpoint") }, 400);
      if (refused === "too_many_pending") return render(viewer, { error: viewer.t("webhooks.error.tooManyTests", { count: MAX_PENDING_TESTS }) }, 429);
      return redirect("/webhooks?done=sent");
    }, { viewer: true, ...hide });
}
