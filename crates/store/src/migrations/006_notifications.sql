-- Notifications (SPEC §11): one row per (happening, target), claimed before it is sent so it
-- is sent once; its outcome (`notification_sent` or `notification_failed`), the attempts, and
-- when its one-tap link was used (a link works once).
CREATE TABLE notifications (
    key          TEXT PRIMARY KEY,
    run_id       TEXT,
    session_name TEXT,
    event        TEXT NOT NULL,
    target       TEXT NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    at           TEXT NOT NULL,
    detail       TEXT NOT NULL DEFAULT '',
    link_used_at TEXT
);
CREATE INDEX notifications_by_run ON notifications (run_id, at);
