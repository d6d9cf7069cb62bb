-- What the runs list shows and searches without reading a journal: the task's text, when the
-- run left the queue (the time before is queued, not work), and the people who acted on it
-- (started, re-ran, approved, rejected, answered, cancelled, resumed), each between newlines.
ALTER TABLE runs ADD COLUMN task TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN running_at TEXT;
ALTER TABLE runs ADD COLUMN people TEXT NOT NULL DEFAULT '';
UPDATE runs SET task = COALESCE(
    (SELECT json_extract(e.payload, '$.task') FROM events e WHERE e.run_id = runs.run_id AND e.kind = 'run_started'), '');
UPDATE runs SET running_at = (
    SELECT e.at FROM events e WHERE e.run_id = runs.run_id
      AND e.kind NOT IN ('run_started', 'run_queued', 'cancel_requested', 'run_cancelled', 'run_finished')
    ORDER BY e.seq LIMIT 1);
UPDATE runs SET people = COALESCE(
    (SELECT char(10) || group_concat(name, char(10)) || char(10) FROM (
        SELECT json_extract(e.payload, '$.by') AS name, MIN(e.seq) AS first FROM events e
        WHERE e.run_id = runs.run_id
          AND e.kind IN ('run_started', 'run_resumed', 'approval_granted', 'approval_rejected', 'escalation_answered', 'cancel_requested')
          AND json_extract(e.payload, '$.by') IS NOT NULL AND json_extract(e.payload, '$.by') != '--yes'
        GROUP BY name ORDER BY first)), '');
CREATE INDEX runs_by_status ON runs (status, created_at);
