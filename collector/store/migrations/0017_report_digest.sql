-- Digests (docs/reports.md, reports/digest): each week's run, every message it sent or tried, and the
-- users who asked for no emails. Kept in the database so that a week goes out once, across restarts and
-- collector replicas, and so that the emails' rate limits count what was really sent.

-- A week's digest: started once; finished when every message was sent or given up on.
CREATE TABLE report_digest_run (
    week          date PRIMARY KEY,  -- the first day of the 7 days summarised (UTC)
    started_at    timestamptz NOT NULL,
    last_cycle_at timestamptz NOT NULL,  -- failed messages are tried again a while after this
    finished_at   timestamptz
);

-- Each chat message: one per chat entry and account. state: sending (claimed: a crash before the answer
-- leaves it so, and it is not sent again), sent, retry (tried again next cycle), failed (given up).
CREATE TABLE report_chat_log (
    week     date NOT NULL REFERENCES report_digest_run ON DELETE CASCADE,
    target   text NOT NULL,  -- the chat entry's name, never its URL (a secret)
    account  text NOT NULL,  -- '': the jobs without an account
    state    text NOT NULL CHECK (state IN ('sending', 'sent', 'retry', 'failed')),
    attempts integer NOT NULL,
    tried_at timestamptz NOT NULL,
    detail   text NOT NULL DEFAULT '',
    PRIMARY KEY (week, target, account)
);

-- Each waste email: at most one per user and week; the rate limit counts those sent (or being sent).
CREATE TABLE report_email_log (
    week     date NOT NULL REFERENCES report_digest_run ON DELETE CASCADE,
    username text NOT NULL,
    address  text NOT NULL,
    state    text NOT NULL CHECK (state IN ('sending', 'sent', 'retry', 'failed')),
    attempts integer NOT NULL,
    tried_at timestamptz NOT NULL,
    sent_at  timestamptz,
    detail   text NOT NULL DEFAULT '',
    PRIMARY KEY (week, username)
);
CREATE INDEX report_email_log_user ON report_email_log (username, tried_at);

-- Users who get no waste emails (PUT /api/v1/reports/opt-out/{user}); the configuration's opt_out too.
CREATE TABLE report_opt_out (
    username text PRIMARY KEY,
    since    timestamptz NOT NULL
);
