/** The store: every SQL statement of the service lives under src/store. */
import type { Db } from "./database";
import { ApiKeyStore } from "./apiKeys";
import { CreditStore } from "./credits";
import { RequestStore } from "./requests";
import { UserStore } from "./users";
import { UpstreamStateStore } from "./upstreams";
import { SessionStore } from "./sessions";
import { SqliteTaskStore } from "./tasks";
import { WebhookStore } from "./webhooks";
import { RedemptionCodeStore } from "./redemptionCodes";
import { ImageRecords, ServerSecretStore } from "./images";
import { UsageStore } from "./usage";
import { retryWhileBusy } from "./busy";
import { Revisions } from "./revisions";
import type { AccountStore, FlowStore } from "../core/store";
import { SqliteClient, type SqlClient } from "./sql";

/** The SQLite store: implements core's store ports (FlowStore, AccountStore) and the rest. */
export interface Store extends FlowStore, AccountStore {
  /** The async SQL client every store module is moving to (store/sql.ts); SQLite here, PostgreSQL with [database] url. */
  sql: SqlClient;
  users: UserStore;
  keys: ApiKeyStore;
  credits: CreditStore;
  requests: RequestStore;
  upstreams: UpstreamStateStore;
  sessions: SessionStore;
  tasks: SqliteTaskStore;
  webhooks: WebhookStore;
  /** Redemption code batches and their hashed codes. */
  redemptions: RedemptionCodeStore;
  /** The image archive's rows (the bytes: store/imageFiles.ts). */
  images: ImageRecords;
  secrets: ServerSecretStore;
  /** The usage report (core/usage) over the request history. */
  usage: UsageStore;
  /** True when the database answers and the schema is current. */
  ready(): boolean;
  /** How long a statement waits inside SQLite for another connection's write lock (blocking the thread). */
  setBusyTimeout(ms: number): void;
  /** Writes the last queued chat rows, then closes the database; closing twice is a no-op. */
  close(): Promise<void>;
}

export function createStore(db: Db, latest: number): Store {
  const sql = new SqliteClient(db);
  const requests = new RequestStore(sql);
  const revisions = new Revisions(sql);
  let closed = false;
  return {
    sql,
    users: new UserStore(sql, revisions),
    keys: new ApiKeyStore(sql, revisions),
    credits: new CreditStore(sql),
    requests,
    upstreams: new UpstreamStateStore(sql, revisions),
    sessions: new SessionStore(sql),
    tasks: new SqliteTaskStore(sql),
    webhooks: new WebhookStore(sql),
    redemptions: new RedemptionCodeStore(sql),
    images: new ImageRecords(sql),
    secrets: new ServerSecretStore(sql),
    usage: new UsageStore(sql, () => requests.flushChats()),
    whenWritable: (write, opts) => retryWhileBusy(write, opts),
    ready() {
      try {
        const v = db.query<{ v: number | null }, []>("SELECT MAX(version) AS v FROM schema_migrations").get()?.v ?? 0;
        return v === latest;
      } catch {
        return false;
      }
    },
    setBusyTimeout(ms: number) {
      db.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(ms))}`);
    },
    async close() {
      // Closing twice (a test's cleanup after the server's own stop) is a no-op, not an error.
      if (closed) return;
      closed = true;
      // The last chat rows: wait a little for another process's write lock rather than lose them.
      db.exec("PRAGMA busy_timeout = 2000");
      await requests.stopChats();
      db.close();
    },
  };
}
