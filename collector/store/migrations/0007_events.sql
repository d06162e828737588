-- Discrete events: XID errors and GPUs lost or back (from exporters), stragglers and alerts later.
-- Rare next to samples, so one plain table; retention deletes by time like the rollups.
CREATE TABLE event (
    event_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts       timestamptz NOT NULL,
    node_id  integer NOT NULL REFERENCES node,
    gpu_id   integer REFERENCES gpu,
    kind     text NOT NULL,
    code     integer,
    count    integer NOT NULL DEFAULT 1 CHECK (count > 0),
    message  text
);
CREATE INDEX event_ts ON event (ts);
CREATE INDEX event_node_ts ON event (node_id, ts);
