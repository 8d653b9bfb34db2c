/** The store: every SQL statement of the service lives under src/store. */
import type { Db } from "./database";
import { ApiKeyStore } from "./apiKeys";
import { CreditStore } from "./credits";
import { RequestStore } from "./requests";
import { UserStore } from "./users";
import { UpstreamStateStore } from "./upstreams";
import { SessionStore } from "./sessions";
import { TaskRecords } from "./tasks";
import { WebhookStore } from "./webhooks";
import { RedemptionCodeStore } from "./redemptionCodes";
import { ImageRecords } from "./images";
import { ServerSecretStore } from "./serverSecrets";
import { UsageStore } from "./usage";
import { retryWhileBusy } from "./busy";
import { Revisions } from "./revisions";
import type { AccountStore, FlowStore } from "../core/store";
import { isDatabaseUnreachable, SqliteClient, type SqlClient } from "./sql";
import { InstanceStore } from "./instances";
import { newInstanceId } from "./instanceId";
import { checkpointInBackground, type BackgroundCheckpoints } from "./walCheckpoints";

export { newInstanceId } from "./instanceId";

/** The SQLite store: implements core's store ports (FlowStore, AccountStore) and the rest. */
export interface Store extends FlowStore, AccountStore {
  /** The SQL client under every module (store/sql.ts): SQLite in data_dir, or PostgreSQL with [database] url. */
  sql: SqlClient;
  /** This process's instance id: the owner its charges and claimed tasks record ([instance] id, or random per start). */
  instanceId: string;
  /** Which instances are alive, and the pending requests of those that are not (core/instances). */
  instances: InstanceStore;
  users: UserStore;
  keys: ApiKeyStore;
  credits: CreditStore;
  requests: RequestStore;
  upstreams: UpstreamStateStore;
  sessions: SessionStore;
  tasks: TaskRecords;
  webhooks: WebhookStore;
  /** Redemption code batches and their hashed codes. */
  redemptions: RedemptionCodeStore;
  /** The image archive's rows (the bytes: store/imageFiles.ts). */
  images: ImageRecords;
  secrets: ServerSecretStore;
  /** The usage report (core/usage) over the request history. */
  usage: UsageStore;
  /** True when the database answers and the schema is current. */
  ready(): Promise<boolean>;
  /** How long a statement waits inside SQLite for another connection's write lock (blocking the thread); PostgreSQL has no such wait. */
  setBusyTimeout(ms: number): void;
  /**
   * A serving process: SQLite's WAL checkpoints run on a worker thread from now on, not in the
   * connection that answers requests (store/walCheckpoints.ts); until close. No-op on PostgreSQL
   * and in memory.
   */
  checkpointInBackground(onProblem: (message: string) => void): void;
  /** Writes the last queued chat rows, then closes the database; closing twice is a no-op. */
  close(): Promise<void>;
}

/**
 * The store over either engine: a bun:sqlite handle (wrapped in a SqliteClient) or an already
 * migrated SqlClient (store/open.ts opens PostgreSQL). Every module is written once for both.
 */
export function createStore(backend: Db | SqlClient, latest: number, opts: { instanceId?: string } = {}): Store {
  const instanceId = opts.instanceId ?? newInstanceId();
  const sql: SqlClient = "dialect" in backend ? backend : new SqliteClient(backend);
  const sqlite = sql instanceof SqliteClient ? sql.db : null;
  const requests = new RequestStore(sql);
  const revisions = new Revisions(sql);
  let closed = false;
  let checkpoints: BackgroundCheckpoints | null = null;
  return {
    sql,
    instanceId,
    instances: new InstanceStore(sql),
    users: new UserStore(sql, revisions),
    keys: new ApiKeyStore(sql, revisions),
    credits: new CreditStore(sql, instanceId),
    requests,
    upstreams: new UpstreamStateStore(sql, revisions),
    sessions: new SessionStore(sql),
    tasks: new TaskRecords(sql, instanceId),
    webhooks: new WebhookStore(sql),
    redemptions: new RedemptionCodeStore(sql),
    images: new ImageRecords(sql),
    secrets: new ServerSecretStore(sql),
    usage: new UsageStore(sql, () => requests.flushChats()),
    whenWritable: (write, opts) => retryWhileBusy(write, opts),
    isConnectionLost: isDatabaseUnreachable,
    async ready() {
      try {
        const row = await sql.get<{ v: number | null }>("SELECT MAX(version) AS v FROM schema_migrations");
        return (row?.v ?? 0) === latest;
      } catch {
        return false;
      }
    },
    setBusyTimeout(ms: number) {
      sqlite?.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(ms))}`);
    },
    checkpointInBackground(onProblem) {
      if (!sqlite || checkpoints || closed || sqlite.filename === ":memory:" || sqlite.filename === "") return;
      checkpoints = checkpointInBackground(sqlite, onProblem);
    },
    async close() {
      // Closing twice (a test's cleanup after the server's own stop) is a no-op, not an error.
      if (closed) return;
      closed = true;
      // The last chat rows: wait a little for another process's write lock rather than lose them.
      sqlite?.exec("PRAGMA busy_timeout = 2000");
      await requests.stopChats();
      await checkpoints?.stop();
      await sql.close();
    },
  };
}
