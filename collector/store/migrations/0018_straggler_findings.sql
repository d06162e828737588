-- Findings about a whole job rather than one of its ranks (stragglers/detector.py): a job slowed by the
-- fabric, or by another job's traffic on shared nodes or switches, blames no node (node_id NULL) and says
-- which cluster the job ran in and, where known, the job that slowed it.
ALTER TABLE straggler ALTER COLUMN node_id DROP NOT NULL;
ALTER TABLE straggler ADD COLUMN cluster text;
ALTER TABLE straggler ADD COLUMN aggressor_job text;
UPDATE straggler s SET cluster = n.cluster FROM node n WHERE n.node_id = s.node_id;

-- How the straggler watch judged each running job: "synchronous" (its ranks wait for each other, so a
-- slow one is a straggler) or "independent" (replicas that wait for nobody: not judged), and the
-- measure it went by (the median wander of the job's parts' shares, stragglers/synchrony.py).
CREATE TABLE straggler_job_model (
    cluster    text NOT NULL,
    job_id     text NOT NULL,
    model      text NOT NULL,
    wander     real,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (cluster, job_id)
);
