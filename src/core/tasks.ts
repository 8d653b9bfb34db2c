/**
 * Image tasks: every image request that must outlive its connection (an async request, a
 * streamed one, one sent with an Idempotency-Key) is a task whose id is the request's id. This
 * module holds the task as clients see it and the port through which finished tasks are
 * announced (webhooks).
 */
import type { ErrorBody } from "./errorBody";
import type { ImageResultBody } from "./imageResult";

export type TaskStatus = "queued" | "running" | "succeeded" | "failed" | "canceled";

/** The task object of the API (`object: "image.task"`), also the payload of its webhooks. */
export interface ImageTaskObject {
  id: string;
  object: "image.task";
  status: TaskStatus;
  /** Unix seconds. */
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  model: string;
  endpoint: "generations" | "edits";
  /** 1-based place in the async queue, while queued. */
  queue_position?: number;
  /** 0..1 while running, when the engine reports it. */
  progress?: number;
  /** Unix seconds: a cancel was asked for while it ran (it is being aborted, or its image was finished first). */
  cancel_requested_at?: number;
  /** Exactly the synchronous 200 body, once succeeded (without the image in the list and in webhooks). */
  result?: ImageResultBody;
  /** The OpenAI error object, once failed or canceled. */
  error?: ErrorBody["error"];
}

export type TaskEventType = "image.task.succeeded" | "image.task.failed" | "image.task.canceled";

export interface TaskEvent {
  type: TaskEventType;
  userId: number;
  task: ImageTaskObject;
  /** A per-request webhook URL given with the task (besides the user's own endpoint). */
  webhookUrl?: string;
}

/** Where finished tasks are announced (the webhook dispatcher implements it). */
export interface TaskEventSink {
  /** Must not throw and must not wait for delivery: it records the event for delivery. */
  taskFinished(event: TaskEvent): void;
}

export const noTaskEvents: TaskEventSink = { taskFinished() {} };
