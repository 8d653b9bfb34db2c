/** The viewer's usage dashboard, one request's detail page, and the history as CSV. */
import { Elysia } from "elysia";
import type { Services } from "../../services";
import { USAGE_DASHBOARD_DAYS } from "../../core/limits";
import { usageRange, usageReport, type UsageRow } from "../../core/usage";
import type { RequestRow } from "../../store/requests";
import { csvLine } from "../../workbench/csv";
import { requestDetailPage } from "../../workbench/pages/requestDetail";
import { usagePage } from "../../workbench/pages/usage";
import { workbenchGuards } from "./guards";
import { htmlResponse, problemPage } from "./respond";

const hide = { detail: { hide: true } };

/** Rows per database read while the CSV streams: memory stays bounded whatever the history's length. */
const EXPORT_PAGE_ROWS = 500;

const CSV_COLUMNS = [
  "id", "created_at", "finished_at", "kind", "endpoint", "model", "status", "key", "credits_charged", "credits_refunded",
  "queue_ms", "generation_ms", "upstream_latency_ms", "attempts", "prompt_tokens", "completion_tokens", "error_code", "error_message", "prompt",
] as const;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function usageRoutes(services: Services) {
  const { store, clock } = services;

  /**
   * Users whose CSV export is streaming (in this instance): one at a time each. An export reads
   * the whole history (2.7 s of reads for a million rows, paced by the client's reading), so a
   * client opening many at once would multiply that for every other request's sake.
   */
  const exporting = new Set<number>();

  /** "name (prefix…)" for each of the user's keys, revoked ones included. */
  const keyLabels = async (userId: number) => new Map((await store.keys.listForUser(userId)).map((k) => [k.id, `${k.name} (${k.prefix}…)`]));

  function csvRow(r: RequestRow, keys: Map<number, string>): string {
    return csvLine([
      r.id, iso(r.created_at), iso(r.finished_at), r.kind, r.endpoint, r.model, r.status, r.key_id === null ? "workbench" : (keys.get(r.key_id) ?? `#${r.key_id}`),
      r.credits_charged, r.credits_refunded, r.queue_ms, r.generation_ms, r.upstream_latency_ms, r.attempts, r.prompt_tokens, r.completion_tokens,
      r.error_code, r.error_message, r.prompt,
    ]);
  }

  return new Elysia({ name: "workbench.usage" })
    .use(workbenchGuards(services))
    .get("/usage", async ({ viewer }) => {
      const userId = viewer.user.id;
      const range = usageRange({}, clock(), USAGE_DASHBOARD_DAYS);
      const days = await usageReport(store.usage, userId, range, "day");
      const byModel = (rows: UsageRow[]) => [...rows].sort((a, b) => b.requests - a.requests);
      const [models, keys, modelDays, keyDays] = await Promise.all([
        store.usage.usage(userId, range, "model"),
        store.usage.usage(userId, range, "key"),
        store.usage.usageDaily(userId, range, "model"),
        store.usage.usageDaily(userId, range, "key"),
      ]);
      return htmlResponse(
        usagePage(viewer, { range, days: days.rows, totals: days.totals, models: byModel(models), keys: byModel(keys), modelDays, keyDays }),
      );
    }, { viewer: true, ...hide })
    .get("/credits/requests/:id", async ({ viewer, params }) => {
      const userId = viewer.user.id;
      const r = await store.requests.get(params.id);
      // Another user's request reads as one that does not exist.
      if (!r || r.user_id !== userId) return problemPage(viewer, 404, viewer.t("requestDetail.notFound.title"), viewer.t("requestDetail.notFound.text"));
      const imageId = r.kind === "image" ? ((await store.images.imageIdsForRequests(userId, [r.id], clock())).get(r.id) ?? null) : null;
      return htmlResponse(requestDetailPage(viewer, { request: r, keyLabel: r.key_id === null ? null : ((await keyLabels(userId)).get(r.key_id) ?? `#${r.key_id}`), imageId }));
    }, { viewer: true, ...hide })
    .get("/credits/history.csv", async ({ viewer }) => {
      const userId = viewer.user.id;
      const keys = await keyLabels(userId);
      // Checked and taken with no await between: two requests at once cannot both pass.
      if (exporting.has(userId)) {
        const busy = problemPage(viewer, 429, viewer.t("usage.export.busy.title"), viewer.t("usage.export.busy.text"));
        busy.headers.set("retry-after", "5");
        return busy;
      }
      exporting.add(userId);
      // Released once, whichever comes first: the last page, a failed read, the client gone.
      const release = () => void exporting.delete(userId);
      let after: { createdAt: number; id: string } | null = null;
      let started = false;
      // Pulled page by page as the client reads: the whole history is never in memory at once.
      const stream = new ReadableStream<string>({
        async pull(controller) {
          try {
            if (!started) {
              started = true;
              controller.enqueue(csvLine([...CSV_COLUMNS]));
            }
            const rows = await store.requests.exportPage(userId, after, EXPORT_PAGE_ROWS);
            if (rows.length > 0) controller.enqueue(rows.map((r) => csvRow(r, keys)).join(""));
            if (rows.length < EXPORT_PAGE_ROWS) {
              release();
              return controller.close();
            }
            const last = rows[rows.length - 1]!;
            after = { createdAt: last.created_at, id: last.id };
          } catch (e) {
            release();
            throw e;
          }
        },
        cancel: release,
      });
      return new Response(stream.pipeThrough(new TextEncoderStream()), {
        headers: {
          "content-type": "text/csv; charset=utf-8",
          "content-disposition": `attachment; filename="atelier-history-${new Date(clock()).toISOString().slice(0, 10)}.csv"`,
          "cache-control": "no-store",
          "x-content-type-options": "nosniff",
        },
      });
    }, { viewer: true, ...hide });
}
