/**
 * The async tasks API: GET /v1/images/tasks/{id}, GET /v1/images/tasks (the user's own, newest
 * first, cursor paging), POST /v1/images/tasks/{id}/cancel. The runner is core/taskRunner.ts.
 */
import { Elysia, t } from "elysia";
import type { Services } from "../../../services";
import { apiAuth } from "../../auth";
import { TaskNotFound } from "../../../core/taskRunner";
import { bearerSecurity, errorResponses, sharedModels } from "../../shared";
import { imageResponseSchema, imageTaskListSchema, imageTaskSchema } from "./model";

/** The list's query (made per app: Elysia compiles schemas in place). Exported for the document's error examples. */
export const imageTaskListQuery = () =>
  t.Object({
    status: t.Optional(t.Union([t.Literal("queued"), t.Literal("running"), t.Literal("succeeded"), t.Literal("failed"), t.Literal("canceled")], { description: "Only tasks in this state." })),
    // Elysia's t.Integer: a query value arrives as text.
    limit: t.Optional(t.Integer({ minimum: 1, maximum: 100, description: "1 to 100 (default 20)." })),
    after: t.Optional(t.String({ description: "A task id: list the tasks older than it (the previous page's last id)." })),
  });

export function imageTasksRoutes(services: Pick<Services, "auth" | "tasks" | "store">) {
  const { tasks } = services;
  return new Elysia({ name: "v1.images.tasks", prefix: "/v1/images/tasks" })
    .use(sharedModels)
    // The task's result is an ImageResponse: registered here too (the same schema under the same name).
    .model({ ImageResponse: imageResponseSchema(), ImageTask: imageTaskSchema(), ImageTaskList: imageTaskListSchema() })
    .use(apiAuth(services.auth))
    .get(
      "",
      async ({ principal, query }) => {
        const limit = query.limit ?? 20;
        const rows = await services.store.tasks.list(principal.userId, { status: query.status, limit: limit + 1, after: query.after });
        // Without the images: a page of 100 would read (disk, S3) and encode 100 of them.
        const data = await Promise.all(rows.slice(0, limit).map((r) => tasks.describe(r, { withImage: false })));
        return { object: "list" as const, data, has_more: rows.length > limit };
      },
      {
        query: imageTaskListQuery(),
        response: { 200: "ImageTaskList", ...errorResponses(400, 401, 403) },
        detail: {
          tags: ["Images"],
          summary: "List your image tasks",
          description:
            "Your async tasks (and streamed or idempotent requests), newest first; `after` pages through older ones. Expired tasks are not listed. The list carries no images: a succeeded task's `result.data[]` has `revised_prompt` only (no `b64_json`), `result.image_id` names the image, and `GET /v1/images/tasks/{id}` returns it.",
          security: bearerSecurity,
          operationId: "listImageTasks",
        },
      },
    )
    .get("/:id", async ({ principal, params }) => {
      const task = await tasks.describe(await tasks.taskOf(principal.userId, params.id));
      // Succeeded, but its image is no longer kept (deleted, or over the storage budget): as expired.
      if (task.status === "succeeded" && !task.result) throw new TaskNotFound(task.id, true);
      return task;
    }, {
      params: t.Object({ id: t.String() }),
      response: { 200: "ImageTask", ...errorResponses(401, 403, 404) },
      detail: {
        tags: ["Images"],
        summary: "Retrieve an image task",
        description: "The task with its queue position, progress, result or error. After `[tasks] retention_hours` a finished task answers 404 `task_expired` (a task sent with an Idempotency-Key lasts at least as long as its key, 24 hours).",
        security: bearerSecurity,
        operationId: "retrieveImageTask",
      },
    })
    .post(
      "/:id/cancel",
      async ({ principal, params }) => {
        await tasks.taskOf(principal.userId, params.id);
        return await tasks.describe(await tasks.cancel(principal.userId, params.id));
      },
      {
        params: t.Object({ id: t.String() }),
        response: { 200: "ImageTask", ...errorResponses(401, 403, 404, 409) },
        detail: {
          tags: ["Images"],
          summary: "Cancel an image task",
          description:
            "A queued task is canceled and refunded at once. A running one is aborted by the server instance that runs it, then refunded: the answer waits a few seconds for that and shows the task as it then is, usually `canceled`; still `running` with `cancel_requested_at` when its engine has not stopped yet (poll the task: it ends `canceled`), or `succeeded` if its image was finished first. A task that has ended answers 409 `task_not_cancelable`.",
          security: bearerSecurity,
          operationId: "cancelImageTask",
        },
      },
    );
}
