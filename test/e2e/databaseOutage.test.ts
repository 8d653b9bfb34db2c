/**
 * Losing PostgreSQL ([database] url): requests fail cleanly with 503 database_unavailable and
 * nothing charged, /readyz says so, a generation that was running when the database went away
 * has its success recorded once it is back, and service resumes without a restart. The
 * database sits behind a TCP proxy the test cuts (every connection dropped, new ones refused).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { startTestServer } from "../support/server";
import { startPostgres, type TestPostgres } from "../support/postgresServer";
import { startTcpProxy, type TcpProxy } from "../support/tcpProxy";
import { ControlledEngine } from "../support/images";
import { until } from "../support/until";

let pg: TestPostgres;
let proxy: TcpProxy;
beforeAll(async () => {
  pg = await startPostgres({ migrated: true });
  proxy = startTcpProxy(Number(new URL(pg.url).port));
});
afterAll(async () => {
  proxy.stop();
  await pg.stop();
});

test("a database outage: 503 uncharged, readyz 503, the running generation's record lands after, no restart needed", async () => {
  const held = new ControlledEngine();
  const url = new URL(pg.url);
  url.port = String(proxy.port);
  const server = await startTestServer({
    config: (c) => {
      c.database.url = url.toString();
      c.server.log_requests = false;
    },
    customize: (s) => s.engines.registerBuiltinImage(held),
  });
  try {
    const { userId, key } = await server.userWithKey({ credits: 5 });
    const generate = () =>
      fetch(`${server.url}/v1/images/generations`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ prompt: "a harbour", size: "64x64" }),
      });

    // One generation is charged and running when the database goes away.
    held.hold();
    const running = generate();
    await until(() => held.waiting === 1, "the generation to start");
    proxy.cut();

    const refused = await generate();
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    const body = (await refused.json()) as { error: { code: string; type: string } };
    expect(body.error).toMatchObject({ code: "database_unavailable", type: "server_error" });
    expect((await fetch(`${server.url}/readyz`)).status).toBe(503);

    // The running one finishes during the outage: its answer goes out, its record waits.
    held.releaseAll();
    expect((await running).status).toBe(200);

    proxy.restore();
    await until(async () => (await fetch(`${server.url}/readyz`)).status === 200, "readyz to recover");
    await server.services.background.idle();
    held.behave = async (job) => held.png(job);
    const after = await generate();
    expect(after.status).toBe(200);

    // Two images charged, none refunded, none left pending; the ledger sums to the balance.
    const db = pg.client();
    expect(await server.balance(userId)).toBe(3);
    const rows = await db.all<{ status: string }>("SELECT status FROM requests WHERE user_id = ? AND kind = 'image' ORDER BY created_at", [userId]);
    expect(rows.map((r) => r.status)).toEqual(["succeeded", "succeeded"]);
    const ledger = await db.get<{ s: number }>("SELECT CAST(SUM(amount) AS BIGINT) AS s FROM ledger WHERE user_id = ?", [userId]);
    expect(ledger?.s).toBe(3);
  } finally {
    proxy.restore();
    await server.close();
  }
});
