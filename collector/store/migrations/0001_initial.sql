-- Inventory: clusters, racks and nodes as exporters report them; GPUs and IB ports per node.
CREATE TABLE node (
    node_id    integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster    text NOT NULL,
    name       text NOT NULL,
    rack       text NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cluster, name)
);

CREATE TABLE gpu (
    gpu_id     integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id    integer NOT NULL REFERENCES node,
    gpu_index  smallint NOT NULL,
    uuid       text NOT NULL,
    model      text NOT NULL,
    pci_bus_id text NOT NULL,
    UNIQUE (node_id, gpu_index)
);

CREATE TABLE ib_port (
    port_id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id integer NOT NULL REFERENCES node,
    device  text NOT NULL,
    port    smallint NOT NULL,
    UNIQUE (node_id, device, port)
);

-- One row per accepted batch: a retried batch (same exporter_id and seq) is recognised and not
-- stored twice, without a unique index on every sample row.
CREATE TABLE ingest_batch (
    exporter_id uuid NOT NULL,
    seq         bigint NOT NULL,
    node_id     integer NOT NULL REFERENCES node,
    received_at timestamptz NOT NULL DEFAULT now(),
    gpu_rows    integer NOT NULL,
    port_rows   integer NOT NULL,
    PRIMARY KEY (exporter_id, seq)
);

-- Wide rows: one per GPU per timestamp, one column per metric; NULL = not reported.
CREATE TABLE gpu_sample (
    ts                  timestamptz NOT NULL,
    gpu_id              integer NOT NULL,
    up                  boolean NOT NULL,
    util_pct            real,
    mem_copy_util_pct   real,
    sm_active_pct       real,
    tensor_active_pct   real,
    fb_used_bytes       bigint,
    fb_total_bytes      bigint,
    temp_c              real,
    mem_temp_c          real,
    power_w             real,
    power_limit_w       real,
    energy_j            double precision,
    sm_clock_mhz        real,
    mem_clock_mhz       real,
    clock_event_reasons bigint,
    pcie_replay         bigint,
    ecc_corrected       bigint,
    ecc_uncorrected     bigint
);
CREATE INDEX gpu_sample_ts_brin ON gpu_sample USING brin (ts);
CREATE INDEX gpu_sample_gpu_ts ON gpu_sample (gpu_id, ts);

CREATE TABLE ib_port_sample (
    ts            timestamptz NOT NULL,
    port_id       integer NOT NULL,
    xmit_bytes    bigint,
    rcv_bytes     bigint,
    xmit_packets  bigint,
    rcv_packets   bigint,
    xmit_wait     bigint,
    symbol_errors bigint,
    link_downed   bigint,
    rcv_errors    bigint,
    state         smallint,
    rate_gbps     real
);
CREATE INDEX ib_port_sample_ts_brin ON ib_port_sample USING brin (ts);
CREATE INDEX ib_port_sample_port_ts ON ib_port_sample (port_id, ts);
