-- Slurm jobs' account and partition (from the prolog's mapping file, deploy/slurm/prolog.sh), for usage
-- reports by account and partition. NULL: not a Slurm job, or the job has none.
ALTER TABLE job_allocation
    ADD COLUMN account   text,
    ADD COLUMN partition text;
