/**
 * Instance liveness (core/instances.ts) over the real store rows (store/instances.ts, SQLite in
 * memory) with a fake clock and manual timers: who refunds a pending request, and when.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { InstanceLiveness } from "../../src/core/instances";
import { InstanceStore } from "../../src/store/instances";
import { openDatabase } from "../../src/store/database";
import { SqliteClient } from "../../src/store/sql";
import { fakeClock } from "../support/fakeClock";
import type { Logger } from "../../src/logger";

const quiet: Logger = { log() {}, info() {}, warn() {}, error() {} };

function setup() {
  const sql = new SqliteClient(openDatabase(":memory:"));
  const clock = fakeClock(1_000_000);
  const records = new InstanceStore(sql);
  const refunds: string[] = [];
  // The refund's exactly-once guard is the pending → interrupted transition, as in store/credits.
  const refundInterrupted = async (id: string) => {
    const { changes } = await sql.run("UPDATE requests SET status = 'interrupted' WHERE id = ? AND status = 'pending'", [id]);
    if (changes === 1) refunds.push(id);
    return changes === 1;
  };
  const timers: (() => void)[] = [];
  const instance = (id: string, logger: Logger = quiet) =>
    new InstanceLiveness(
      { id, host: "test", heartbeatMs: 1_000, leaseMs: 5_000 },
      {
        records,
        refundInterrupted,
        clock: clock.now,
        logger,
        schedule: (fn) => {
          timers.push(fn);
          return () => {};
        },
      },
    );
  const pending = async (id: string, owner: string | null) => {
    await sql.run("INSERT OR IGNORE INTO users (id, email, role, credits, created_at) VALUES (1, 'u@x', 'user', 0, 0)");
    await sql.run(
      "INSERT INTO requests (id, user_id, kind, endpoint, model, status, created_at, owner) VALUES (?, 1, 'image', '/v1/images/generations', 'm', 'pending', ?, ?)",
      [id, clock.now(), owner],
    );
  };
  const status = async (id: string) => (await sql.get<{ status: string }>("SELECT status FROM requests WHERE id = ?", [id]))?.status;
  return { sql, clock, records, refunds, instance, pending, status };
}

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup) await c();
  cleanup = [];
});

describe("instance liveness", () => {
  test("a restart under the same id refunds its own pending requests at once, and nobody else's", async () => {
    const t = setup();
    const a = t.instance("a");
    const b = t.instance("b");
    await a.start();
    await b.start();
    await t.pending("req_a1", "a");
    await t.pending("req_b1", "b");
    // a restarts (a new process under the same configured id): its own request is interrupted work.
    const again = t.instance("a");
    expect(await again.start()).toEqual(["req_a1"]);
    expect(await t.status("req_b1")).toBe("pending");
  });

  test("a live instance's requests are never refunded; a dead one's are, once, after its lease", async () => {
    const t = setup();
    const a = t.instance("a");
    const b = t.instance("b");
    const c = t.instance("c");
    await a.start();
    await b.start();
    await c.start();
    await t.pending("req_a1", "a");
    await t.pending("req_a2", "a");
    await t.pending("req_b1", "b");
    // a keeps beating; b goes silent (SIGKILL).
    for (let i = 0; i < 4; i++) {
      t.clock.advance(1_000);
      await a.tick();
      expect(await c.tick()).toEqual([]);
    }
    expect(t.refunds).toEqual([]);
    t.clock.advance(1_500); // b's last beat is now 5.5 s old: past its 5 s lease.
    // Both survivors sweep; the request is refunded exactly once, by whichever saw it first.
    const [byC, byA] = [await c.tick(), await a.tick()];
    expect([...byC, ...byA]).toEqual(["req_b1"]);
    expect(t.refunds).toEqual(["req_b1"]);
    expect(await t.status("req_a1")).toBe("pending");
    expect(await t.status("req_a2")).toBe("pending");
  });

  test("queued async tasks and requests without an owner are left alone by the sweep", async () => {
    const t = setup();
    const a = t.instance("a");
    await a.start();
    await t.pending("req_old", null);
    await t.pending("req_queued", "gone");
    await t.sql.run(
      "INSERT INTO tasks (id, user_id, mode, status, endpoint, model, created_at) VALUES ('req_queued', 1, 'async', 'queued', 'generations', 'm', 0)",
    );
    await t.pending("req_running", "gone");
    t.clock.advance(10_000);
    expect(await a.tick()).toEqual(["req_running"]);
    expect(await t.status("req_old")).toBe("pending");
    expect(await t.status("req_queued")).toBe("pending");
  });

  test("an instance that cannot write its heartbeat for a lease reports itself unready", async () => {
    const t = setup();
    const a = t.instance("a");
    await a.start();
    expect(a.healthy()).toBe(true);
    await t.sql.exec("DROP TABLE instances"); // the database stops taking its heartbeat
    for (let i = 0; i < 5; i++) {
      t.clock.advance(1_000);
      expect(await a.tick()).toEqual([]);
    }
    expect(a.healthy()).toBe(false);
  });

  test("a second live instance under the same id is warned about", async () => {
    const t = setup();
    const warnings: string[] = [];
    const logger: Logger = { ...quiet, warn: (msg) => warnings.push(msg) };
    await t.instance("a").start();
    t.clock.advance(10);
    await t.instance("a", logger).start();
    expect(warnings.some((w) => w.includes("instance id was alive"))).toBe(true);
  });

  test("a lease shorter than two heartbeats is refused", () => {
    const t = setup();
    expect(
      () =>
        new InstanceLiveness(
          { id: "x", host: null, heartbeatMs: 1_000, leaseMs: 1_500 },
          { records: t.records, refundInterrupted: async () => false, clock: t.clock.now, logger: quiet },
        ),
    ).toThrow(RangeError);
  });
});
