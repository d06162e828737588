-- Kubernetes attribution (exporter/jobs/kubernetes.py): the pod and container that held the GPU, in its
-- namespace, and the workload that makes its pods one job ("JobSet/train-7"). NULL for Slurm jobs.
ALTER TABLE job_allocation
    ADD COLUMN namespace text,
    ADD COLUMN pod       text,
    ADD COLUMN container text,
    ADD COLUMN workload  text;
-- the jobs pages filter by namespace
CREATE INDEX job_allocation_namespace ON job_allocation (namespace, started_at) WHERE namespace IS NOT NULL;
