-- The alert rules' interface: read-only views in schema "alerting", documented in docs/alerts.md.
-- Rules see these (search_path = alerting, pg_catalog) and nothing else unqualified; they are kept
-- stable: columns are added, never renamed or removed, without a new documented version.
-- Re-created at collector start when this file changes (alerts/views.py).
CREATE SCHEMA alerting;

-- The newest sample of every GPU reported in the last 5 minutes (a GPU silent for longer has no row:
-- the exporter-down alert covers it). One index probe per GPU.
CREATE VIEW alerting.gpu_latest AS
SELECT n.cluster, n.rack, n.name AS node, g.gpu_index AS gpu, g.uuid, g.model,
       g.gpu_id, g.node_id, s.ts, extract(epoch FROM now() - s.ts)::float8 AS age_s, s.up,
       s.util_pct, s.mem_copy_util_pct, s.sm_active_pct, s.tensor_active_pct,
       s.fb_used_bytes, s.fb_total_bytes, s.temp_c, s.mem_temp_c, s.power_w, s.power_limit_w,
       s.sm_clock_mhz, s.mem_clock_mhz, s.clock_event_reasons,
       s.ecc_corrected, s.ecc_uncorrected, s.remapped_rows_correctable, s.remapped_rows_uncorrectable,
       s.remap_pending, s.remap_failure, s.pcie_replay,
       s.nvlink_crc_errors, s.nvlink_replay_errors, s.nvlink_recovery_errors, s.recovery_action
FROM public.gpu g
JOIN public.node n USING (node_id)
CROSS JOIN LATERAL (
    SELECT * FROM public.gpu_sample x
    WHERE x.gpu_id = g.gpu_id AND x.ts > now() - interval '5 minutes'
    ORDER BY x.ts DESC LIMIT 1
) s;

-- A counter's growth from `first` to `last`; one that went down was reset, and its growth is its new
-- value. Simple enough for the planner to inline.
CREATE FUNCTION alerting.growth(last float8, first float8) RETURNS float8
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN last < first THEN last ELSE last - first END $$;

-- How much each GPU's counters grew over the last `span` (first and last sample in it).
CREATE FUNCTION alerting.gpu_increase(span interval)
RETURNS TABLE (cluster text, rack text, node text, gpu smallint, uuid text, gpu_id integer, node_id integer,
               ecc_corrected float8, ecc_uncorrected float8, remapped_rows_uncorrectable float8,
               pcie_replay float8, nvlink_crc_errors float8, nvlink_replay_errors float8,
               nvlink_recovery_errors float8, throttle_power_s float8, throttle_thermal_s float8)
LANGUAGE sql STABLE AS $$
SELECT n.cluster, n.rack, n.name, g.gpu_index, g.uuid, g.gpu_id, g.node_id,
       alerting.growth(l.ecc_corrected, f.ecc_corrected),
       alerting.growth(l.ecc_uncorrected, f.ecc_uncorrected),
       alerting.growth(l.remapped_rows_uncorrectable, f.remapped_rows_uncorrectable),
       alerting.growth(l.pcie_replay, f.pcie_replay),
       alerting.growth(l.nvlink_crc_errors, f.nvlink_crc_errors),
       alerting.growth(l.nvlink_replay_errors, f.nvlink_replay_errors),
       alerting.growth(l.nvlink_recovery_errors, f.nvlink_recovery_errors),
       alerting.growth(l.throttle_power_s, f.throttle_power_s),
       alerting.growth(l.throttle_thermal_s, f.throttle_thermal_s)
FROM public.gpu g
JOIN public.node n USING (node_id)
CROSS JOIN LATERAL (
    SELECT * FROM public.gpu_sample x WHERE x.gpu_id = g.gpu_id AND x.ts > now() - span ORDER BY x.ts LIMIT 1
) f
CROSS JOIN LATERAL (
    SELECT * FROM public.gpu_sample x WHERE x.gpu_id = g.gpu_id AND x.ts > now() - span ORDER BY x.ts DESC LIMIT 1
) l
$$;

-- One-minute rollups per GPU, as means (rolled up once a minute is settled: about a minute behind).
CREATE VIEW alerting.gpu_1m AS
SELECT n.cluster, n.rack, n.name AS node, g.gpu_index AS gpu, g.uuid, g.gpu_id, g.node_id, r.bucket,
       r.samples, r.up_samples,
       r.util_sum / nullif(r.util_n, 0) AS util_pct,
       r.sm_active_sum / nullif(r.sm_active_n, 0) AS sm_active_pct,
       r.tensor_sum / nullif(r.tensor_n, 0) AS tensor_active_pct,
       r.power_sum / nullif(r.power_n, 0) AS power_w,
       r.temp_sum / nullif(r.temp_n, 0) AS temp_c,
       r.temp_max::float8 AS temp_max_c,
       r.sm_clock_sum / nullif(r.sm_clock_n, 0) AS sm_clock_mhz,
       r.sm_clock_min::float8 AS sm_clock_min_mhz
FROM public.gpu_rollup_1m r
JOIN public.gpu g USING (gpu_id)
JOIN public.node n ON n.node_id = g.node_id;

-- Since when a GPU's utilisation has stayed under `under`, as far as its last `span` of data tells: the
-- first sample after the last one at `under` or over (a rule's `since`, so that its `for` clock starts
-- when the data shows the condition began). Idle for all of `span`: its first sample in it. Minute
-- rollups where settled (a minute whose mean is at `under` or over counts as busy to its end) and raw
-- samples after them, so a GPU idle for hours costs a few hundred rows, not thousands.
CREATE FUNCTION alerting.util_under_since(of_gpu integer, under float8, span interval DEFAULT '6 hours')
RETURNS timestamptz LANGUAGE sql STABLE AS $$
WITH rolled AS (
    SELECT coalesce(max(r.bucket) + interval '1 minute', now() - span) AS until
    FROM public.gpu_rollup_1m r WHERE r.gpu_id = of_gpu AND r.bucket > now() - span
), busy AS (
    SELECT coalesce(
        (SELECT max(x.ts) FROM public.gpu_sample x
         WHERE x.gpu_id = of_gpu AND x.ts >= rolled.until AND x.util_pct >= under),
        (SELECT max(r.bucket) + interval '1 minute' FROM public.gpu_rollup_1m r
         WHERE r.gpu_id = of_gpu AND r.bucket > now() - span AND r.util_n > 0 AND r.util_sum >= under * r.util_n),
        now() - span) AS until
    FROM rolled
)
SELECT min(x.ts) FROM public.gpu_sample x, busy WHERE x.gpu_id = of_gpu AND x.ts > busy.until
$$;

-- The newest sample of every InfiniBand port reported in the last 5 minutes. state: 4 = ACTIVE;
-- phys_state: 5 = LinkUp (kernel ABI sysfs-class-infiniband).
CREATE VIEW alerting.nic_latest AS
SELECT n.cluster, n.rack, n.name AS node, p.device, p.port, p.port_id, p.node_id,
       s.ts, extract(epoch FROM now() - s.ts)::float8 AS age_s,
       s.state, s.phys_state, s.rate_gbps, s.xmit_bytes, s.rcv_bytes, s.xmit_wait,
       s.symbol_errors, s.link_downed, s.rcv_errors, s.link_error_recovery, s.xmit_discards
FROM public.ib_port p
JOIN public.node n USING (node_id)
CROSS JOIN LATERAL (
    SELECT * FROM public.ib_port_sample x
    WHERE x.port_id = p.port_id AND x.ts > now() - interval '5 minutes'
    ORDER BY x.ts DESC LIMIT 1
) s;

CREATE FUNCTION alerting.nic_increase(span interval)
RETURNS TABLE (cluster text, rack text, node text, device text, port smallint, port_id integer,
               node_id integer, symbol_errors float8, link_downed float8, rcv_errors float8,
               link_error_recovery float8, xmit_discards float8, xmit_wait float8)
LANGUAGE sql STABLE AS $$
SELECT n.cluster, n.rack, n.name, p.device, p.port, p.port_id, p.node_id,
       alerting.growth(l.symbol_errors, f.symbol_errors),
       alerting.growth(l.link_downed, f.link_downed),
       alerting.growth(l.rcv_errors, f.rcv_errors),
       alerting.growth(l.link_error_recovery, f.link_error_recovery),
       alerting.growth(l.xmit_discards, f.xmit_discards),
       alerting.growth(l.xmit_wait, f.xmit_wait)
FROM public.ib_port p
JOIN public.node n USING (node_id)
CROSS JOIN LATERAL (
    SELECT * FROM public.ib_port_sample x WHERE x.port_id = p.port_id AND x.ts > now() - span ORDER BY x.ts LIMIT 1
) f
CROSS JOIN LATERAL (
    SELECT * FROM public.ib_port_sample x WHERE x.port_id = p.port_id AND x.ts > now() - span
    ORDER BY x.ts DESC LIMIT 1
) l
$$;

-- Discrete events the exporters report: kind 'xid' (code = XID), 'gpu_lost', 'gpu_recovered'.
CREATE VIEW alerting.events AS
SELECT e.ts, n.cluster, n.rack, n.name AS node, g.gpu_index AS gpu, g.uuid, e.gpu_id, e.node_id,
       e.kind, e.code, e.count, e.message
FROM public.event e
JOIN public.node n USING (node_id)
LEFT JOIN public.gpu g ON g.gpu_id = e.gpu_id;

-- GPU-to-job allocations; running = not ended. On Kubernetes also the namespace, pod and container that held
-- the GPU and the workload that makes its pods one job (NULL for batch-scheduler jobs). A MIG device held:
-- its UUID, GPU instance and profile, beside its parent GPU (NULL: the whole GPU). On Slurm, the job's account and
-- partition (NULL elsewhere).
CREATE VIEW alerting.job_gpus AS
SELECT a.job_id, a.username AS "user", n.cluster, n.rack, n.name AS node, g.gpu_index AS gpu, g.uuid,
       a.gpu_id, a.node_id, a.started_at, a.last_seen, a.ended_at, a.ended_at IS NULL AS running,
       a.namespace, a.pod, a.container, a.workload,
       m.uuid AS mig_uuid, m.gpu_instance_id, m.profile AS mig_profile,
       a.account, a.partition
FROM public.job_allocation a
JOIN public.node n USING (node_id)
JOIN public.gpu g ON g.gpu_id = a.gpu_id
LEFT JOIN public.mig_device m ON m.mig_id = a.mig_id;

-- Stragglers found by the detector; gpu is NULL when the culprit is a node or its NIC, node too when
-- the finding is about the whole job (slowed by the fabric, or by another job's traffic: aggressor_job).
-- culprit: where, in the pages' words ("node-005 GPU 5", "node-005 NIC mlx5_2 port 1", "the fabric").
CREATE VIEW alerting.stragglers AS
SELECT s.straggler_id, s.job_id, coalesce(n.cluster, s.cluster) AS cluster, n.rack, n.name AS node,
       g.gpu_index AS gpu, g.uuid, s.cause, s.slowdown::float8 AS slowdown, s.evidence, s.started_at,
       s.declared_at, s.ended_at, s.ended_at IS NULL AS active, s.aggressor_job,
       CASE WHEN n.name IS NULL THEN coalesce('job ' || s.aggressor_job || '''s traffic', 'the fabric')
            WHEN g.gpu_index IS NOT NULL THEN n.name || ' GPU ' || g.gpu_index
            WHEN p.device IS NOT NULL THEN n.name || ' NIC ' || p.device || ' port ' || p.port
            ELSE n.name END AS culprit
FROM public.straggler s
LEFT JOIN public.node n USING (node_id)
LEFT JOIN public.gpu g ON g.gpu_id = s.gpu_id
LEFT JOIN public.ib_port p ON p.port_id = s.port_id;

-- When each node's exporter last pushed, and its usual push interval (smoothed).
CREATE VIEW alerting.exporters AS
SELECT n.cluster, n.rack, n.name AS node, n.node_id, s.last_seen,
       extract(epoch FROM now() - s.last_seen)::float8 AS age_s, s.push_interval_s
FROM public.node_seen s
JOIN public.node n USING (node_id);

-- Fleet health (health/): each node not healthy, with since when and why, and the jobs running on it now.
CREATE VIEW alerting.node_health AS
SELECT n.cluster, n.rack, n.name AS node, n.node_id, h.state, h.since, h.reason, h.held_by,
       extract(epoch FROM now() - h.since)::float8 AS age_s,
       (SELECT count(DISTINCT a.job_id) FROM public.job_allocation a
        WHERE a.node_id = n.node_id AND a.ended_at IS NULL) AS jobs
FROM public.health_node h
JOIN public.node n USING (node_id)
WHERE h.state <> 'healthy';

-- Each rack's power now against its budget, as the dashboard reads them: `power_w` the sum of its GPUs'
-- newest readings (those reported in the last 5 minutes); `budget_w` the site's (the collector's
-- --rack-budgets, "cluster/rack" or "rack" -> kW, set by the engine for each evaluation) or else the sum
-- of its GPUs' power limits; `near_budget` the share of a budget the overview flags as near it (one
-- constant: collector/query/rack_power.py NEAR_BUDGET; NULL outside the engine's evaluations);
-- `near_since` since when it has drawn that much, minute by minute (the rollup) over the last 6 hours.
CREATE VIEW alerting.rack_power AS
WITH site AS (
    SELECT coalesce(nullif(current_setting('gpuscope.rack_budgets_kw', true), ''), '{}')::jsonb AS kw,
           nullif(current_setting('gpuscope.rack_near_budget', true), '')::float8 AS near_budget
), racks AS (
    SELECT g.cluster, g.rack, count(*) AS gpus, sum(g.power_w) AS power_w, sum(g.power_limit_w) AS power_limit_w
    FROM alerting.gpu_latest g GROUP BY g.cluster, g.rack
), budgeted AS (
    SELECT r.*, coalesce(1000 * coalesce(s.kw ->> (r.cluster || '/' || r.rack), s.kw ->> r.rack)::float8,
                         r.power_limit_w) AS budget_w,
           s.near_budget
    FROM racks r CROSS JOIN site s
)
SELECT b.cluster, b.rack, b.gpus, b.power_w, b.power_limit_w, b.budget_w, b.power_w / nullif(b.budget_w, 0) AS share,
       b.near_budget,
       (SELECT min(m.bucket) FROM public.rack_power_1m m
        WHERE m.cluster = b.cluster AND m.rack = b.rack AND m.bucket > now() - interval '6 hours'
          AND m.bucket > coalesce(
              (SELECT max(u.bucket) FROM public.rack_power_1m u
               WHERE u.cluster = b.cluster AND u.rack = b.rack AND u.bucket > now() - interval '6 hours'
                 AND u.watts < b.near_budget * b.budget_w),
              '-infinity')) AS near_since
FROM budgeted b;

-- The database as the collector that evaluates the rules sees it (collector/store/availability.py), set
-- by the alert engine for each evaluation (alerts/facts.py): no row where nothing was set. `state` is
-- ok, unreachable, restarting or disk_full; `free_bytes` the embedded server's free space (NULL for --db).
CREATE VIEW alerting.collector_database AS
SELECT current_setting('gpuscope.database_state', true) AS state,
       current_setting('gpuscope.database_reason', true) AS reason,
       nullif(current_setting('gpuscope.database_free_bytes', true), '')::float8 AS free_bytes
WHERE coalesce(current_setting('gpuscope.database_state', true), '') <> '';
