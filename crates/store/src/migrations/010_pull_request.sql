-- The pull request a run from a forge delivered (SPEC §14), for the runs list: its number and
-- address from the run's latest `delivered` event.
ALTER TABLE runs ADD COLUMN pr_number INTEGER;
ALTER TABLE runs ADD COLUMN pr_url TEXT;
UPDATE runs SET
    pr_number = (SELECT json_extract(e.payload, '$.number') FROM events e
                 WHERE e.run_id = runs.run_id AND e.kind = 'delivered' ORDER BY e.seq DESC LIMIT 1),
    pr_url = (SELECT json_extract(e.payload, '$.url') FROM events e
              WHERE e.run_id = runs.run_id AND e.kind = 'delivered' ORDER BY e.seq DESC LIMIT 1);
