-- Workers and their leases (SPEC §13). Times that decide who may write are the database's
-- (`now()`), never a worker's clock: machines need not agree on the time.

-- The runs submitted to workers (`run --submit`), in the order they were submitted: where
-- their repository is, the ref they start from, and the labels a worker must have.
CREATE TABLE submissions (
    run_id       TEXT        PRIMARY KEY,
    position     BIGSERIAL   NOT NULL,
    repo         TEXT        NOT NULL,
    base         TEXT        NOT NULL,
    labels       JSONB       NOT NULL DEFAULT '{}',
    submitted_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX submissions_in_order ON submissions (position);

-- Each worker process, as it last said.
CREATE TABLE workers (
    worker_id    TEXT        PRIMARY KEY,
    host         TEXT        NOT NULL,
    labels       JSONB       NOT NULL DEFAULT '{}',
    slots        INTEGER     NOT NULL,
    lease_ms     BIGINT      NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    stopped_at   TIMESTAMPTZ
);

-- Who may write a submitted run's journal: the worker holding its lease, of this epoch.
-- A claim of an expired lease raises the epoch; appends of a fenced store check it under
-- the run's row lock, so a holder that was taken over cannot write again.
CREATE TABLE leases (
    run_id     TEXT        PRIMARY KEY,
    worker_id  TEXT,
    epoch      BIGINT      NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX leases_by_worker ON leases (worker_id);
