-- The runs list from indexes (its cost does not grow with the number of runs), as SQLite's
-- migration 009: those of a status (the waiting ones) in an index walked newest first, and
-- the number of runs counted as they are added. (`updated_at` is the last event's time
-- already: every append writes it.) Only a run's insert takes the count's row, before the
-- feed's counter like every append, so appends never wait on each other in a cycle.
DROP INDEX runs_by_status;
CREATE INDEX runs_by_status ON runs (status, created_us, run_id);
CREATE TABLE run_count (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    n   BIGINT  NOT NULL
);
INSERT INTO run_count (one, n) SELECT TRUE, COUNT(*) FROM runs;
CREATE FUNCTION run_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE run_count SET n = n + 1 WHERE one;
    ELSE
        UPDATE run_count SET n = n - 1 WHERE one;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_counted AFTER INSERT OR DELETE ON runs FOR EACH ROW EXECUTE FUNCTION run_counted();
