-- The notifier survives restarts (SPEC §11): how far into the journal's feed and the auto
-- loops' log it has looked (a restarted daemon goes on from there, so a gate reached or a loop
-- needing a person while it was down is notified),
-- and each notification's request, so one claimed but not yet sent when the daemon died is
-- sent by the next (once: its row says so).
CREATE TABLE notifier (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    feed_position INTEGER NOT NULL,
    auto_position INTEGER
);
ALTER TABLE notifications ADD COLUMN request TEXT;
