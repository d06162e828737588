-- Fleet health (health/): each node's state with since when and why, the evidence behind it, every
-- transition (the audit trail), and every scheduler action tried or only planned (dry run).
CREATE TABLE health_node (
    node_id    integer PRIMARY KEY REFERENCES node,
    state      text NOT NULL CHECK (state IN ('healthy', 'suspect', 'unhealthy', 'drained', 'validating')),
    since      timestamptz NOT NULL,
    reason     text NOT NULL DEFAULT '',
    -- An operator's hold: gpuscope neither drains nor resumes the node until it is lifted.
    held_by    text,
    held_since timestamptz,
    -- The newest evidence time already judged, so a cycle never counts the same finding twice.
    judged_to  timestamptz
);

CREATE TABLE health_evidence (
    evidence_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL,
    node_id     integer NOT NULL REFERENCES node,
    gpu_id      integer REFERENCES gpu,
    kind        text NOT NULL,
    code        integer,
    severity    text NOT NULL CHECK (severity IN ('ignore', 'suspect', 'unhealthy')),
    action      text NOT NULL DEFAULT 'none',
    detail      text NOT NULL
);
-- One row per finding: a rule that sees the same XID again in an overlapping window adds nothing.
CREATE UNIQUE INDEX health_evidence_once
    ON health_evidence (node_id, coalesce(gpu_id, -1), kind, coalesce(code, -1), at);
CREATE INDEX health_evidence_at ON health_evidence (at);

CREATE TABLE health_transition (
    transition_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            timestamptz NOT NULL,
    node_id       integer NOT NULL REFERENCES node,
    from_state    text NOT NULL,
    to_state      text NOT NULL,
    reason        text NOT NULL,
    actor         text NOT NULL CHECK (actor IN ('gpuscope', 'human', 'scheduler'))
);
CREATE INDEX health_transition_at ON health_transition (at);
CREATE INDEX health_transition_node ON health_transition (node_id, at);

CREATE TABLE health_action (
    action_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL,
    node_id   integer NOT NULL REFERENCES node,
    action    text NOT NULL,         -- drain | resume | validate | refused
    scheduler text NOT NULL,         -- slurm | kubernetes | none
    dry_run   boolean NOT NULL,
    ok        boolean,               -- NULL: not run (dry run or refused)
    detail    text NOT NULL          -- the command and what it said, or why it was refused
);
CREATE INDEX health_action_at ON health_action (at);
