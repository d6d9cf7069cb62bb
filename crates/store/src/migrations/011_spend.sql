-- Spend over time (SPEC §15): what each agent attempt used, kept for the longest period a cap
-- counts over, and the holds of attempts in flight under each cap (leased like limit slots).
-- Times in microseconds.
CREATE TABLE spend_uses (
    at_us    INTEGER NOT NULL,
    pipeline TEXT    NOT NULL,
    provider TEXT    NOT NULL,
    person   TEXT    NOT NULL,
    tokens   INTEGER NOT NULL,
    cost_usd REAL    NOT NULL
);
CREATE INDEX spend_uses_by_time ON spend_uses (at_us);
CREATE TABLE spend_holds (
    holder     TEXT    NOT NULL,
    cap_key    TEXT    NOT NULL,
    expires_us INTEGER NOT NULL,
    PRIMARY KEY (holder, cap_key)
);
