-- The journal: every event of every run, in order. The source of truth.
CREATE TABLE events (
    run_id  TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    at      TEXT    NOT NULL,
    kind    TEXT    NOT NULL,
    stage   TEXT,
    payload TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- One row per run, kept in step with the journal in the same transaction (an index for
-- listing; a run's state is always derived from its events).
CREATE TABLE runs (
    run_id     TEXT PRIMARY KEY,
    pipeline   TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    status     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_seq   INTEGER NOT NULL
);
CREATE INDEX runs_by_created ON runs (created_at);
CREATE INDEX runs_by_task ON runs (task_id, created_at);

-- Stage outputs, by task, for reuse by later runs of the same task (`--start-from`).
CREATE TABLE artifacts (
    run_id     TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    stage      TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (run_id, stage, key)
);
CREATE INDEX artifacts_by_task ON artifacts (task_id, stage, seq);
