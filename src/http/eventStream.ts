/**
 * A server-sent-event answer body (`text/event-stream`) shared by the streamed image and chat
 * answers: events written as they come, a comment line after every `heartbeatMs` of silence so
 * proxies keep the connection open ([server] stream_heartbeat_ms), writes after the end dropped.
 */

const encoder = new TextEncoder();

/**
 * The body of a server-sent-event answer. Writes after the end (the client went away, or the
 * stream closed) are dropped; nothing here throws.
 */
export class EventStream {
  readonly readable: ReadableStream<Uint8Array>;
  private controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  private heartbeat: ReturnType<typeof setTimeout> | undefined;
  private beating = false;
  closed = false;

  /** `onCancel`: the reader went away (the client closed the connection). */
  constructor(
    private readonly heartbeatMs: number,
    onCancel?: () => void,
  ) {
    this.readable = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller;
      },
      // The client went away: stop writing, and tell the owner (which decides whether the work goes on).
      cancel: () => {
        this.stop();
        onCancel?.();
      },
    });
  }

  /** A named event (`event:` then `data:`), as OpenAI's image streams send them. */
  event(name: string, data: Record<string, unknown>): void {
    // JSON never contains a raw line break, so one `data:` line carries it.
    this.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /** An unnamed event of one `data:` line (a JSON value, or a literal such as `[DONE]`), as OpenAI's chat streams send them. */
  data(data: Record<string, unknown> | "[DONE]"): void {
    this.write(`data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`);
  }

  /**
   * From now on a comment line goes out after every heartbeatMs of silence. With `announce`,
   * one goes out at once: the runtime sends the status line and headers (x-request-id, the
   * task's id) only with the first bytes, and a client should not wait for the first partial
   * to get them. A caller that writes an event right away needs none.
   */
  startHeartbeat(announce = true): void {
    this.beating = true;
    if (announce) this.write(": started\n\n");
    else this.rearm();
  }

  close(): void {
    if (this.closed) return;
    this.stop();
    try {
      this.controller?.close();
    } catch {
      // already closed or errored by the runtime
    }
  }

  private write(text: string): void {
    if (this.closed || !this.controller) return;
    try {
      this.controller.enqueue(encoder.encode(text));
    } catch {
      this.stop();
      return;
    }
    this.rearm();
  }

  private rearm(): void {
    clearTimeout(this.heartbeat);
    if (this.beating && !this.closed) this.heartbeat = setTimeout(() => this.write(": keep-alive\n\n"), this.heartbeatMs);
  }

  private stop(): void {
    this.closed = true;
    clearTimeout(this.heartbeat);
  }
}

/** The 200 answer carrying the stream. */
export function eventStreamResponse(stream: EventStream): Response {
  return new Response(stream.readable, {
    status: 200,
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      // nginx would otherwise hold the events back until its buffer fills.
      "x-accel-buffering": "no",
    },
  });
}
