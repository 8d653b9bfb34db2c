/**
 * Numbered, forward-only schema migrations. Append new entries; never edit a released one.
 * The database records each applied version in schema_migrations.
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const migrations: Migration[] = [
  {
    version: 1,
    name: "users, api keys, requests, credit ledger, sessions",
    sql: `
      CREATE TABLE users (
        id            INTEGER PRIMARY KEY,
        email         TEXT NOT NULL UNIQUE COLLATE NOCASE,
        password_hash TEXT,
        role          TEXT NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
        credits       INTEGER NOT NULL DEFAULT 0 CHECK (credits >= 0),
        disabled      INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
        created_at    INTEGER NOT NULL
      ) STRICT;

      CREATE TABLE api_keys (
        id           INTEGER PRIMARY KEY,
        user_id      INTEGER NOT NULL REFERENCES users(id),
        name         TEXT NOT NULL,
        prefix       TEXT NOT NULL UNIQUE,
        secret_hash  TEXT NOT NULL UNIQUE,
        created_at   INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at   INTEGER
      ) STRICT;
      CREATE INDEX api_keys_user ON api_keys(user_id);

      -- One row per API request that the history shows (image and chat).
      CREATE TABLE requests (
        id                  TEXT PRIMARY KEY,
        user_id             INTEGER NOT NULL REFERENCES users(id),
        key_id              INTEGER REFERENCES api_keys(id),
        kind                TEXT NOT NULL CHECK (kind IN ('image', 'chat')),
        endpoint            TEXT NOT NULL,
        model               TEXT NOT NULL,
        status              TEXT NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'interrupted')),
        credits_charged     INTEGER NOT NULL DEFAULT 0,
        credits_refunded    INTEGER NOT NULL DEFAULT 0,
        queue_ms            INTEGER,
        generation_ms       INTEGER,
        error_code          TEXT,
        error_message       TEXT,
        prompt              TEXT,
        prompt_tokens       INTEGER,
        completion_tokens   INTEGER,
        upstream_id         TEXT,
        account_id          TEXT,
        attempts            INTEGER,
        upstream_latency_ms INTEGER,
        created_at          INTEGER NOT NULL,
        finished_at         INTEGER,
        CHECK (credits_refunded <= credits_charged)
      ) STRICT;
      CREATE INDEX requests_user_time ON requests(user_id, created_at DESC);
      CREATE INDEX requests_status ON requests(status);

      -- Every change to a balance, signed: grant (+), deduct (-), charge (-), refund (+).
      CREATE TABLE ledger (
        id         INTEGER PRIMARY KEY,
        user_id    INTEGER NOT NULL REFERENCES users(id),
        kind       TEXT NOT NULL CHECK (kind IN ('grant', 'deduct', 'charge', 'refund')),
        amount     INTEGER NOT NULL,
        request_id TEXT REFERENCES requests(id),
        note       TEXT,
        actor      TEXT,
        created_at INTEGER NOT NULL,
        CHECK ((kind IN ('grant', 'refund') AND amount > 0) OR (kind IN ('deduct', 'charge') AND amount < 0))
      ) STRICT;
      CREATE INDEX ledger_user_time ON ledger(user_id, created_at DESC);
      -- The last line of defence for "charged once, refunded at most once".
      CREATE UNIQUE INDEX ledger_once_per_request ON ledger(request_id, kind) WHERE request_id IS NOT NULL;

      CREATE TABLE sessions (
        id_hash    TEXT PRIMARY KEY,
        user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        csrf_token TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX sessions_user ON sessions(user_id);
    `,
  },
  {
    version: 2,
    name: "upstream account state: disabled flags and pool snapshot",
    sql: `
      -- An account that answered 401/403 stays disabled until an admin re-enables it.
      CREATE TABLE upstream_disabled_accounts (
        upstream_id TEXT NOT NULL,
        account_id  TEXT NOT NULL,
        reason      TEXT NOT NULL,
        disabled_at INTEGER NOT NULL,
        PRIMARY KEY (upstream_id, account_id)
      ) STRICT;

      -- The running server's pool state, written throttled, so the CLI can show it.
      CREATE TABLE upstream_pool_snapshot (
        upstream_id TEXT NOT NULL,
        account_id  TEXT NOT NULL,
        state_json  TEXT NOT NULL,
        updated_at  INTEGER NOT NULL,
        PRIMARY KEY (upstream_id, account_id)
      ) STRICT;
    `,
  },
  {
    version: 3,
    name: "image tasks (async, streamed, idempotent requests), their inputs, idempotency keys",
    sql: `
      -- An image request that outlives its connection; its id is the request's id. The credit
      -- stays with the requests row and the ledger; this row holds the task's own life.
      CREATE TABLE tasks (
        id          TEXT PRIMARY KEY REFERENCES requests(id),
        user_id     INTEGER NOT NULL REFERENCES users(id),
        mode        TEXT NOT NULL CHECK (mode IN ('sync', 'async', 'stream')),
        status      TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'canceled')),
        endpoint    TEXT NOT NULL CHECK (endpoint IN ('generations', 'edits')),
        model       TEXT NOT NULL,
        job         TEXT,
        webhook_url TEXT,
        result      TEXT,
        error       TEXT,
        created_at  INTEGER NOT NULL,
        started_at  INTEGER,
        finished_at INTEGER,
        expires_at  INTEGER,
        expired     INTEGER NOT NULL DEFAULT 0 CHECK (expired IN (0, 1))
      ) STRICT;
      CREATE INDEX tasks_user_time ON tasks(user_id, created_at DESC, id DESC);
      CREATE INDEX tasks_queue ON tasks(status, created_at) WHERE status IN ('queued', 'running');
      CREATE INDEX tasks_expiry ON tasks(expires_at) WHERE expired = 0 AND expires_at IS NOT NULL;

      -- The images a queued async task runs with, kept until it finishes.
      CREATE TABLE task_inputs (
        task_id  TEXT NOT NULL REFERENCES tasks(id),
        position INTEGER NOT NULL,
        role     TEXT NOT NULL CHECK (role IN ('image', 'mask')),
        param    TEXT NOT NULL,
        mime     TEXT NOT NULL,
        width    INTEGER NOT NULL,
        height   INTEGER NOT NULL,
        bytes    BLOB NOT NULL,
        PRIMARY KEY (task_id, position)
      ) STRICT;

      -- Idempotency-Key: one per user and key, pointing at the request that answers it.
      CREATE TABLE idempotency_keys (
        user_id     INTEGER NOT NULL REFERENCES users(id),
        key         TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        request_id  TEXT NOT NULL REFERENCES requests(id),
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL,
        PRIMARY KEY (user_id, key)
      ) STRICT;
      CREATE INDEX idempotency_expiry ON idempotency_keys(expires_at);
    `,
  },
  {
    version: 4,
    name: "webhooks: endpoints with sealed signing secrets, deliveries, attempts",
    sql: `
      -- One per user: the endpoint URL and the signing secret, sealed (AES-256-GCM under a key
      -- outside the database); never the secret itself.
      CREATE TABLE webhook_endpoints (
        user_id           INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        url               TEXT,
        secret_sealed     TEXT,
        secret_created_at INTEGER,
        updated_at        INTEGER NOT NULL,
        CHECK ((secret_sealed IS NULL) = (secret_created_at IS NULL))
      ) STRICT;

      -- One event to one URL, retried until delivered or failed; event_id is the webhook-id.
      CREATE TABLE webhook_deliveries (
        id              INTEGER PRIMARY KEY,
        event_id        TEXT NOT NULL,
        user_id         INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        event_type      TEXT NOT NULL,
        source          TEXT NOT NULL CHECK (source IN ('endpoint', 'request', 'test')),
        url             TEXT NOT NULL,
        payload         TEXT NOT NULL,
        state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
        attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        next_attempt_at INTEGER,
        last_status     INTEGER,
        last_error      TEXT,
        created_at      INTEGER NOT NULL,
        finished_at     INTEGER,
        -- Pending means due at a time; finished means a finish time and none.
        CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)),
        CHECK ((state = 'pending') = (finished_at IS NULL))
      ) STRICT;
      CREATE UNIQUE INDEX webhook_deliveries_once ON webhook_deliveries(event_id, url);
      CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) WHERE state = 'pending';
      CREATE INDEX webhook_deliveries_user ON webhook_deliveries(user_id, id DESC);
      CREATE INDEX webhook_deliveries_finished ON webhook_deliveries(finished_at) WHERE state != 'pending';

      CREATE TABLE webhook_attempts (
        id           INTEGER PRIMARY KEY,
        delivery_id  INTEGER NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
        attempted_at INTEGER NOT NULL,
        status       INTEGER,
        error        TEXT,
        duration_ms  INTEGER NOT NULL CHECK (duration_ms >= 0)
      ) STRICT;
      CREATE INDEX webhook_attempts_delivery ON webhook_attempts(delivery_id);
    `,
  },
  {
    version: 5,
    name: "images: the archive of generated images; server secrets",
    sql: `
      -- One row per kept image; the bytes live in the blob store under their sha256 (content
      -- addressed, so rows may share a file). expires_at NULL keeps it until max_bytes evicts it.
      CREATE TABLE images (
        id          TEXT PRIMARY KEY,
        request_id  TEXT NOT NULL,
        user_id     INTEGER NOT NULL,
        mime        TEXT NOT NULL CHECK (mime IN ('image/png', 'image/jpeg', 'image/webp')),
        bytes       INTEGER NOT NULL CHECK (bytes > 0),
        width       INTEGER NOT NULL CHECK (width > 0),
        height      INTEGER NOT NULL CHECK (height > 0),
        sha256      TEXT NOT NULL CHECK (length(sha256) = 64),
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER
      ) STRICT;
      CREATE INDEX images_sha256 ON images(sha256);
      CREATE INDEX images_created ON images(created_at, id);
      CREATE INDEX images_expires ON images(expires_at) WHERE expires_at IS NOT NULL;
      CREATE INDEX images_request ON images(request_id);

      -- Secrets the server makes for itself on first use (the key that signs image links).
      CREATE TABLE server_secrets (
        name       TEXT PRIMARY KEY,
        value      BLOB NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
    `,
  },
  {
    version: 6,
    name: "images by user: the gallery's newest-first pages and storage use per user",
    sql: `
      CREATE INDEX images_user_created ON images(user_id, created_at, id);
    `,
  },
  {
    version: 8,
    name: "api key limits: expiry, credit cap, model allow-list; spend per key",
    sql: `
      -- NULL means "no limit" for each: a key that never expires, has no cap, may use every model.
      ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
      ALTER TABLE api_keys ADD COLUMN credit_cap INTEGER CHECK (credit_cap IS NULL OR credit_cap >= 0);
      -- A JSON array of model ids.
      ALTER TABLE api_keys ADD COLUMN allowed_models TEXT CHECK (allowed_models IS NULL OR json_type(allowed_models) = 'array');

      -- A key's spend (charged minus refunded) is summed inside the charge's transaction: this
      -- index answers it from the index alone.
      CREATE INDEX requests_key_spend ON requests(key_id, credits_charged, credits_refunded) WHERE key_id IS NOT NULL;
    `,
  },
  {
    version: 9,
    name: "requests: a partial index of the pending ones instead of an index of every status",
    sql: `
      -- Only 'pending' is ever looked up by status (the stop's recovery, the pending count); an
      -- index of every row's status cost each history insert a third B-tree update for nothing.
      DROP INDEX requests_status;
      CREATE INDEX requests_pending ON requests(id) WHERE status = 'pending';
    `,
  },
  {
    version: 10,
    name: "redemption codes: batches, hashed one-use codes, and the ledger's redeem kind",
    sql: `
      -- A batch of codes an admin made: each code is worth \`credits\`, usable once until expires_at.
      CREATE TABLE redemption_batches (
        id         INTEGER PRIMARY KEY,
        name       TEXT NOT NULL,
        credits    INTEGER NOT NULL CHECK (credits > 0),
        code_count INTEGER NOT NULL CHECK (code_count > 0),
        expires_at INTEGER,
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;

      -- Only the code's SHA-256 is kept (like an API key's); the CSV at creation is the only copy.
      CREATE TABLE redemption_codes (
        id          INTEGER PRIMARY KEY,
        batch_id    INTEGER NOT NULL REFERENCES redemption_batches(id),
        code_hash   TEXT NOT NULL UNIQUE CHECK (length(code_hash) = 64),
        redeemed_by INTEGER REFERENCES users(id),
        redeemed_at INTEGER,
        CHECK ((redeemed_by IS NULL) = (redeemed_at IS NULL))
      ) STRICT;
      CREATE INDEX redemption_codes_batch ON redemption_codes(batch_id);

      -- The ledger gains the kind 'redeem' (+, naming its code). SQLite cannot change a CHECK in
      -- place, so the table is rebuilt with every row and index as they were.
      CREATE TABLE ledger_v10 (
        id         INTEGER PRIMARY KEY,
        user_id    INTEGER NOT NULL REFERENCES users(id),
        kind       TEXT NOT NULL CHECK (kind IN ('grant', 'deduct', 'charge', 'refund', 'redeem')),
        amount     INTEGER NOT NULL,
        request_id TEXT REFERENCES requests(id),
        note       TEXT,
        actor      TEXT,
        created_at INTEGER NOT NULL,
        code_id    INTEGER REFERENCES redemption_codes(id),
        CHECK ((kind IN ('grant', 'refund', 'redeem') AND amount > 0) OR (kind IN ('deduct', 'charge') AND amount < 0)),
        CHECK ((kind = 'redeem') = (code_id IS NOT NULL))
      ) STRICT;
      INSERT INTO ledger_v10 (id, user_id, kind, amount, request_id, note, actor, created_at)
        SELECT id, user_id, kind, amount, request_id, note, actor, created_at FROM ledger;
      DROP TABLE ledger;
      ALTER TABLE ledger_v10 RENAME TO ledger;
      CREATE INDEX ledger_user_time ON ledger(user_id, created_at DESC);
      CREATE UNIQUE INDEX ledger_once_per_request ON ledger(request_id, kind) WHERE request_id IS NOT NULL;
      -- The last line of defence for "a code credits once".
      CREATE UNIQUE INDEX ledger_once_per_code ON ledger(code_id) WHERE code_id IS NOT NULL;
    `,
  },
  {
    version: 11,
    name: "requests: the failure's detail (the engine's redacted words), shown to admins only",
    sql: `
      -- Upstream transport details (which upstream or account, ECONNREFUSED, the upstream's body)
      -- are for admins (issue 16): users and API clients get error_message only. Already redacted
      -- by the engines and bounded (core/limits MAX_ERROR_DETAIL_CHARS) before it is written.
      ALTER TABLE requests ADD COLUMN error_detail TEXT;
    `,
  },
  {
    version: 12,
    name: "store_revision: a counter that writes other instances must see bump; emails unique by lower(email)",
    sql: `
      -- Caches in every process (key owners, upstream account flags) re-read the database when
      -- this moves. Writes that change a cached fact bump it in their own transaction
      -- (store/revisions bumpExternal), so it works across processes and across machines on
      -- PostgreSQL, where SQLite's PRAGMA data_version does not exist. At most one row, made by
      -- the first bump (no row reads as 0), so a fresh database has no rows (migrate-store copies
      -- only into an empty one).
      CREATE TABLE store_revision (
        id    INTEGER PRIMARY KEY CHECK (id = 1),
        value INTEGER NOT NULL
      ) STRICT;

      -- Emails are stored as given and compared as lower(email) = lower(?), the one comparison
      -- both engines share (PostgreSQL has no NOCASE collation). SQLite's lower() folds ASCII
      -- only, as NOCASE does, so rows unique under NOCASE are unique here too.
      CREATE UNIQUE INDEX users_email_lower ON users(lower(email));
    `,
  },
  {
    version: 13,
    name: "instances with heartbeats; every pending request records the instance that runs it",
    sql: `
      -- Each server instance beats here; a request whose owner stopped beating is refunded once
      -- by whichever instance sees it first (core/instances.ts).
      CREATE TABLE instances (
        id           TEXT PRIMARY KEY,
        host         TEXT,
        started_at   INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL
      ) STRICT;
      ALTER TABLE requests ADD COLUMN owner TEXT;
      CREATE INDEX requests_pending_owner ON requests(owner) WHERE status = 'pending';
    `,
  },
  {
    version: 14,
    name: "history and ledger indexes in ascending time: a new row is appended to its user's range instead of put at its front",
    sql: `
      -- Descending, the newest row (every row, when it is written) went to the front of its user's
      -- range: an insert inside the B-tree for each history and ledger row. Ascending, it goes at
      -- the range's end, which for the most recent writer is the index's end, where a B-tree
      -- appends cheaply: 34.0 k against 30.0 k instructions per history row in a 64-row INSERT
      -- (callgrind; README, Performance). Reading newest first scans the index backwards, with
      -- the same query plans.
      DROP INDEX requests_user_time;
      CREATE INDEX requests_user_time ON requests(user_id, created_at);
      DROP INDEX ledger_user_time;
      CREATE INDEX ledger_user_time ON ledger(user_id, created_at);
    `,
  },
  {
    version: 15,
    name: "spend indexes of image rows only: a key's or a user's spend no longer reads their chat history",
    sql: `
      -- Chat is free: its rows charge nothing, yet every one of them was an entry in the key's
      -- spend index, and the user's spend was summed by reading the user's whole history. A capped
      -- key's image charge summed its spend inside the charge's write transaction: 187 ms (p50)
      -- with a million chat rows on the key, every other write of the server waiting behind it;
      -- the admin's user list, 192 ms per user with as many. Now 0.09 ms and 0.03 ms
      -- (bench/history-reads.ts), and a chat row is one index entry fewer to write. The queries say
      -- kind = 'image' (it is what lets the planner use these partial indexes).
      DROP INDEX requests_key_spend;
      CREATE INDEX requests_key_spend ON requests(key_id, credits_charged, credits_refunded) WHERE key_id IS NOT NULL AND kind = 'image';
      CREATE INDEX requests_user_spend ON requests(user_id, credits_charged, credits_refunded) WHERE kind = 'image';
    `,
  },
  {
    version: 16,
    name: "chat usage by day: the usage report sums a user's chat per day, model and key instead of reading every chat row",
    sql: `
      -- The usage report (GET /v1/usage, the workbench's dashboard) summed the user's rows in its
      -- range on every call: with a million chat rows in 30 days, 0.7-1.8 s per query, on the
      -- serving thread. Chat is free and a chat row never changes once written (it is written
      -- finished, never pending), so its counts are kept here per UTC day, model and key, added
      -- in the same transaction as the batch of rows (store/requests); image rows, which change
      -- (pending, then succeeded or refunded) and each cost credits, are still read live, from
      -- an index of image rows only. key_id 0: no key (the signed-in workbench).
      CREATE TABLE chat_usage (
        user_id   INTEGER NOT NULL REFERENCES users(id),
        day       INTEGER NOT NULL,
        model     TEXT NOT NULL,
        key_id    INTEGER NOT NULL,
        requests  INTEGER NOT NULL,
        succeeded INTEGER NOT NULL,
        failed    INTEGER NOT NULL,
        PRIMARY KEY (user_id, day, model, key_id)
      ) STRICT;
      INSERT INTO chat_usage (user_id, day, model, key_id, requests, succeeded, failed)
        SELECT user_id, created_at / 86400000, model, COALESCE(key_id, 0), COUNT(*),
               SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END), SUM(CASE WHEN status IN ('failed', 'interrupted') THEN 1 ELSE 0 END)
          FROM requests WHERE kind = 'chat' GROUP BY user_id, created_at / 86400000, model, COALESCE(key_id, 0);
      CREATE INDEX requests_user_image_time ON requests(user_id, created_at) WHERE kind = 'image';
    `,
  },
  {
    version: 17,
    name: "history pages in time order from an index: the admin's latest requests and every page read a bounded number of rows",
    sql: `
      -- The history pages (a user's Credits page, the admin's All requests) read with OFFSET and
      -- counted every matching row: with a million rows, the admin's landing page sorted the whole
      -- table (0.5 s per view), a user's deep page or a filter that matched nothing read their
      -- whole history (0.3-0.5 s), on the serving thread. Pages now follow a cursor, read from an
      -- index in time order and search at most a bounded window of rows (store/historyPages);
      -- these are the indexes for the pages that name no user (a user's are requests_user_time
      -- and requests_user_image_time). The image one holds image rows only: chat writes skip it.
      CREATE INDEX requests_time ON requests(created_at);
      CREATE INDEX requests_image_time ON requests(created_at) WHERE kind = 'image';
    `,
  },
  {
    version: 18,
    name: "tasks: a keyed task is kept at least until its Idempotency-Key expires",
    sql: `
      -- A replay of an Idempotency-Key answers with its task, so the task must outlive the key
      -- even when [tasks] retention_hours is shorter. The key's expiry is written with the charge
      -- (the task may end on another instance, after a restart, by a cancel or a sweep), and
      -- every statement that ends a task keeps it at least that long (store/tasks.ts,
      -- TASK_EXPIRES_AT_SQL). NULL: no key, the retention alone decides.
      ALTER TABLE tasks ADD COLUMN keep_until INTEGER;
    `,
  },
  {
    version: 19,
    name: "tasks: a cancel asked for while the task runs, for the instance that runs it",
    sql: `
      -- A running task is aborted by the instance that runs it, which may not be the one the
      -- cancel reached: the request is recorded here, and the runner looks for it while it runs
      -- tasks (core/taskRunner.ts). NULL: no cancel asked for.
      ALTER TABLE tasks ADD COLUMN cancel_requested_at INTEGER;
    `,
  },
  {
    version: 20,
    name: "webhooks: the previous signing secret, still signing beside the new one until it expires",
    sql: `
      -- A rotation keeps the secret it replaces until previous_secret_expires_at ([webhooks]
      -- rotation_overlap_s), sealed like the current one (the same key, the same user bound in),
      -- so that deliveries already on their way and receivers not yet updated still verify:
      -- every attempt is signed with both until then (core/webhooksEndpoints). One previous at
      -- most: a second rotation replaces it. NULL and NULL: none. The index finds the expired
      -- ones for the hourly sweep without reading every endpoint.
      ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_sealed TEXT;
      ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_expires_at INTEGER
        CHECK ((previous_secret_sealed IS NULL) = (previous_secret_expires_at IS NULL));
      CREATE INDEX webhook_endpoints_previous_expiry ON webhook_endpoints(previous_secret_expires_at) WHERE previous_secret_expires_at IS NOT NULL;
    `,
  },
  {
    version: 21,
    name: "webhooks: each user's pending deliveries in due order, so a claim reads a few rows a user instead of the whole backlog",
    sql: `
      -- The delivery worker's claim (store/webhooks claimDue) ranked every due pending delivery
      -- with a window function on each call: with 100 000 queued for a receiver that is down,
      -- about 190 ms a claim on SQLite, on the serving thread (bench/webhook-claim.ts). With this
      -- index it walks the users with pending deliveries (one seek each) and reads each one's
      -- oldest few due rows in order, so a claim costs about the users, not the backlog.
      -- webhook_deliveries_due stays: nextDue reads the earliest due time of all users from it.
      CREATE INDEX webhook_deliveries_user_due ON webhook_deliveries(user_id, next_attempt_at, id) WHERE state = 'pending';
    `,
  },
];
