-- Provider limits shared by every process of the store (SPEC §13): the slots attempts hold
-- (leased: a dead holder's slot comes back when it expires), the requests and tokens used in
-- the last hour, and the pauses a rate limit with a reset time set. Times in microseconds.
CREATE TABLE limit_slots (
    holder     TEXT    NOT NULL,
    limit_key  TEXT    NOT NULL,
    expires_us INTEGER NOT NULL,
    PRIMARY KEY (holder, limit_key)
);
CREATE INDEX limit_slots_by_key ON limit_slots (limit_key, expires_us);
CREATE TABLE limit_uses (
    limit_key TEXT    NOT NULL,
    at_us     INTEGER NOT NULL,
    requests  INTEGER NOT NULL,
    tokens    INTEGER NOT NULL
);
CREATE INDEX limit_uses_by_key ON limit_uses (limit_key, at_us);
CREATE TABLE limit_pauses (
    limit_key TEXT    PRIMARY KEY,
    until_us  INTEGER NOT NULL,
    why       TEXT    NOT NULL
);
