-- The pull request a run from a forge delivered (SPEC §14), for the runs list, as SQLite's
-- migration 010: its number and address from the run's latest `delivered` event.
ALTER TABLE runs ADD COLUMN pr_number BIGINT;
ALTER TABLE runs ADD COLUMN pr_url TEXT;
UPDATE runs SET
    pr_number = (SELECT (e.payload::jsonb ->> 'number')::BIGINT FROM events e
                 WHERE e.run_id = runs.run_id AND e.kind = 'delivered' ORDER BY e.seq DESC LIMIT 1),
    pr_url = (SELECT e.payload::jsonb ->> 'url' FROM events e
              WHERE e.run_id = runs.run_id AND e.kind = 'delivered' ORDER BY e.seq DESC LIMIT 1);
