/**
 * One id per image request, everywhere: the answer's `id` (JSON with b64_json or url, the
 * stream's completed event, an async task's result) is the x-request-id header, the history
 * row, the ledger's request_id and the request_id of the request's log line.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { makePng } from "../support/images";
import { startTestServer, type TestServer } from "../support/server";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

const post = (key: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}`, ...headers }, body: JSON.stringify(body) });

/** The history row, the ledger charge and the access log line of the user's only request all carry `id`. */
async function expectOneIdEverywhere(userId: number, id: string): Promise<void> {
  const { store } = server.services;
  const history = await store.requests.list({ userId, limit: 10 });
  expect(history.map((r) => r.id)).toEqual([id]);
  const charges = (await store.credits.ledger(userId, 10)).filter((l) => l.kind === "charge");
  expect(charges.map((l) => l.request_id)).toEqual([id]);
  const logged = server.logs.map((l) => JSON.parse(l) as { msg: string; request_id?: string; user_id?: number }).filter((l) => l.msg === "request" && l.request_id === id);
  expect(logged).toHaveLength(1);
}

describe("the image answer's id is the request's one id", () => {
  test("b64_json: body id === x-request-id === history id === ledger request_id === log line", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const res = await post(u.key, "/v1/images/generations", { prompt: "a lighthouse", size: "64x64" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { id: string; data: { b64_json?: string }[] };
    expect(body.id).toMatch(/^req_/);
    expect(res.headers.get("x-request-id")).toBe(body.id);
    expect(body.data[0]!.b64_json).toBeString();
    // Give the log line (written after the answer) a moment.
    await Bun.sleep(50);
    await expectOneIdEverywhere(u.userId, body.id);
  });

  test("url answers and the official openai client (which keeps the unknown field) see the same id", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const client = new OpenAI({ apiKey: u.key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const { data, response } = await client.images.generate({ prompt: "a harbour", size: "64x64" as "1024x1024", response_format: "url" }).withResponse();
    const id = (data as unknown as { id: string }).id;
    expect(data.data![0]!.url).toStartWith(server.url);
    expect(response.headers.get("x-request-id")).toBe(id);
    await Bun.sleep(50);
    await expectOneIdEverywhere(u.userId, id);
  });

  test("a multipart edit answers with its request id", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const form = new FormData();
    form.append("prompt", "add a balloon");
    form.append("size", "64x64");
    form.append("image", new Blob([makePng(64, 64)], { type: "image/png" }), "in.png");
    const res = await fetch(`${server.url}/v1/images/edits`, { method: "POST", headers: { authorization: `Bearer ${u.key}` }, body: form });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { id: string };
    expect(res.headers.get("x-request-id")).toBe(body.id);
    await Bun.sleep(50);
    await expectOneIdEverywhere(u.userId, body.id);
  });

  test("the stream's completed event carries it", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const res = await post(u.key, "/v1/images/generations", { prompt: "a lighthouse", size: "64x64", stream: true, partial_images: 1 });
    expect(res.status).toBe(200);
    const text = await res.text();
    const completed = text
      .split("\n\n")
      .filter((b) => b.startsWith("event: image_generation.completed"))
      .map((b) => JSON.parse(b.split("\n").find((l) => l.startsWith("data: "))!.slice(6)) as { id: string });
    expect(completed).toHaveLength(1);
    expect(completed[0]!.id).toBe(res.headers.get("x-request-id")!);
    await Bun.sleep(50);
    await expectOneIdEverywhere(u.userId, completed[0]!.id);
  });

  test("an async task's result carries the task id, which is the request id", async () => {
    const u = await server.userWithKey({ credits: 1 });
    const res = await post(u.key, "/v1/images/generations", { prompt: "a lighthouse", size: "64x64" }, { prefer: "respond-async" });
    expect(res.status).toBe(202);
    const task = (await res.json()) as { id: string };
    expect(task.id).toBe(res.headers.get("x-request-id")!);
    let done: { status: string; result?: { id: string } } = { status: "queued" };
    for (let i = 0; i < 100 && done.status !== "succeeded" && done.status !== "failed"; i++) {
      await Bun.sleep(50);
      done = (await (await fetch(`${server.url}/v1/images/tasks/${task.id}`, { headers: { authorization: `Bearer ${u.key}` } })).json()) as typeof done;
    }
    expect(done.status).toBe("succeeded");
    expect(done.result!.id).toBe(task.id);
    await expectOneIdEverywhere(u.userId, task.id);
  });
});
