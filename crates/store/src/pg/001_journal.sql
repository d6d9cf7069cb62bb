-- The journal on PostgreSQL: the same tables as SQLite's (migrations 001-005 there), with
-- times kept as RFC 3339 text as the events have them and as microseconds for ordering.

-- Every event of every run, in order. The source of truth.
CREATE TABLE events (
    run_id  TEXT   NOT NULL,
    seq     BIGINT NOT NULL,
    at      TEXT   NOT NULL,
    kind    TEXT   NOT NULL,
    stage   TEXT,
    payload TEXT   NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX events_by_kind ON events (run_id, kind, seq);

-- One row per run, kept in step with the journal in the same transaction. Appends lock it
-- (`FOR UPDATE`): one writer at a time per run.
CREATE TABLE runs (
    run_id     TEXT   PRIMARY KEY,
    pipeline   TEXT   NOT NULL,
    task_id    TEXT   NOT NULL,
    status     TEXT   NOT NULL,
    created_at TEXT   NOT NULL,
    created_us BIGINT NOT NULL,
    updated_at TEXT   NOT NULL,
    last_seq   BIGINT NOT NULL,
    owner      TEXT,
    task       TEXT   NOT NULL DEFAULT '',
    running_at TEXT,
    people     TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX runs_by_created ON runs (created_us, run_id);
CREATE INDEX runs_by_task ON runs (task_id, created_us);
CREATE INDEX runs_by_status ON runs (status, created_us);

-- Stage outputs, by task, for later runs of the same task (`--start-from`).
CREATE TABLE artifacts (
    run_id  TEXT   NOT NULL,
    task_id TEXT   NOT NULL,
    stage   TEXT   NOT NULL,
    key     TEXT   NOT NULL,
    value   TEXT   NOT NULL,
    seq     BIGINT NOT NULL,
    PRIMARY KEY (run_id, stage, key)
);
CREATE INDEX artifacts_by_task ON artifacts (task_id, stage, seq);

-- One cursor over every run's events in commit order. A position comes from `feed_counter`,
-- whose single row each appending transaction locks until it commits: positions are dense
-- and grow in commit order, so a reader never sees a gap filled later.
CREATE TABLE feed (
    id     BIGINT PRIMARY KEY,
    run_id TEXT   NOT NULL,
    seq    BIGINT NOT NULL
);
CREATE TABLE feed_counter (
    one  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    last BIGINT  NOT NULL
);
INSERT INTO feed_counter (one, last) VALUES (TRUE, 0);
