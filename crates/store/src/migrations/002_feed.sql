-- One cursor over every run's events, in the order they were committed: the daemon's
-- multiplexed event stream resumes from it (`Last-Event-ID` on `GET /api/events`). Writers
-- take turns (`BEGIN IMMEDIATE`), so ids grow in commit order and a reader never sees a gap
-- filled later.
CREATE TABLE feed (
    id     INTEGER PRIMARY KEY,
    run_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL
);
INSERT INTO feed (run_id, seq) SELECT run_id, seq FROM events ORDER BY at, run_id, seq;
