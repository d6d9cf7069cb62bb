-- The runs list from indexes (its cost does not grow with the number of runs): the time of a
-- run's last event kept on its row (`updated_at`, written once per append), the newest runs
-- and those of a status (the waiting ones) each in an index walked newest first, and the
-- number of runs counted as they are added.
UPDATE runs SET
    updated_at = COALESCE((SELECT e.at FROM events e WHERE e.run_id = runs.run_id ORDER BY e.seq DESC LIMIT 1), updated_at),
    last_seq = COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.run_id = runs.run_id), last_seq);
DROP INDEX runs_by_created;
CREATE INDEX runs_newest ON runs (created_at, run_id);
DROP INDEX runs_by_status;
CREATE INDEX runs_by_status ON runs (status, created_at, run_id);
CREATE TABLE run_count (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    n   INTEGER NOT NULL
);
INSERT INTO run_count (one, n) SELECT 1, COUNT(*) FROM runs;
CREATE TRIGGER run_added AFTER INSERT ON runs BEGIN
    UPDATE run_count SET n = n + 1 WHERE one = 1;
END;
CREATE TRIGGER run_removed AFTER DELETE ON runs BEGIN
    UPDATE run_count SET n = n - 1 WHERE one = 1;
END;
