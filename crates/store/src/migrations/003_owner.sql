-- Who drives each run (the last owner its journal named, as JSON), so listing runs can tell
-- one whose process died without reading its journal.
ALTER TABLE runs ADD COLUMN owner TEXT;
UPDATE runs SET owner = (
    SELECT json_extract(e.payload, '$.owner') FROM events e
    WHERE e.run_id = runs.run_id AND e.kind IN ('run_started', 'run_resumed')
    ORDER BY e.seq DESC LIMIT 1
);
