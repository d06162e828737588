-- When each node's exporter last pushed, and its smoothed push interval (NULL until a second push):
-- the "exporter down" rule compares the two. Updated by the writer once per node per group commit.
CREATE TABLE node_seen (
    node_id         integer PRIMARY KEY REFERENCES node,
    last_seen       timestamptz NOT NULL,
    push_interval_s double precision
);

-- Alert instances, one per rule and label set (fingerprint), with their state. The engine's memory:
-- a restarted engine picks up pending timers and firing alerts from here.
CREATE TABLE alert_instance (
    fingerprint   text PRIMARY KEY,         -- hash of the labels, alertname included
    alertname     text NOT NULL,
    rule_group    text NOT NULL,
    labels        jsonb NOT NULL,
    annotations   jsonb NOT NULL,
    value         double precision,
    state         text NOT NULL CHECK (state IN ('pending', 'firing', 'resolved')),
    active_at     timestamptz NOT NULL,     -- when the condition started to hold
    fired_at      timestamptz,
    last_true_at  timestamptz NOT NULL,     -- last evaluation where the condition held (keep_firing_for)
    resolved_at   timestamptz,
    evaluated_at  timestamptz NOT NULL
);
CREATE INDEX alert_instance_state ON alert_instance (state);
CREATE INDEX alert_instance_resolved ON alert_instance (resolved_at) WHERE state = 'resolved';

-- Notification groups (receiver, group key): what was last sent, for group_wait, group_interval and
-- repeat_interval across restarts.
CREATE TABLE alert_group (
    receiver       text NOT NULL,
    group_key      text NOT NULL,
    group_labels   jsonb NOT NULL,
    created_at     timestamptz NOT NULL,
    notified_at    timestamptz,
    firing_sent    text[] NOT NULL DEFAULT '{}',   -- fingerprints firing in the last notification
    PRIMARY KEY (receiver, group_key)
);

-- The outbox: a notification is written in the same transaction as the group state that decided it,
-- and delivered from here, so a restart neither loses nor repeats it.
CREATE TABLE alert_notification (
    notification_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    receiver        text NOT NULL,
    group_key       text NOT NULL,
    status          text NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
    firing          integer NOT NULL,
    resolved        integer NOT NULL,
    message         jsonb NOT NULL,               -- group labels and the alerts as sent
    created_at      timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    http_status     integer,
    last_error      text,
    sent_at         timestamptz
);
CREATE INDEX alert_notification_due ON alert_notification (next_attempt_at) WHERE status = 'pending';
CREATE INDEX alert_notification_created ON alert_notification (created_at);

CREATE TABLE alert_silence (
    silence_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    matchers   jsonb NOT NULL,                -- [{"name", "op", "value"}], op one of = != =~ !~
    starts_at  timestamptz NOT NULL DEFAULT now(),
    ends_at    timestamptz NOT NULL,
    created_by text NOT NULL,
    comment    text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at)
);
CREATE INDEX alert_silence_ends ON alert_silence (ends_at);

-- How each rule fared at its last evaluation: a broken rule is reported here (and logged), and the
-- others keep running.
CREATE TABLE alert_rule_status (
    rule_group   text NOT NULL,
    alertname    text NOT NULL,
    evaluated_at timestamptz NOT NULL,
    seconds      double precision NOT NULL,
    instances    integer NOT NULL,
    error        text,
    PRIMARY KEY (rule_group, alertname)
);
