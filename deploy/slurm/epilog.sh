#!/bin/sh
# gpuscope Slurm epilog: forget this job's GPUs. Removes only files that still name this job, so a
# late epilog cannot erase the next job's record. Install: Epilog=/etc/slurm/gpuscope-epilog.sh.
set -eu

map_dir=${GPUSCOPE_SLURM_MAP_DIR:-/run/gpuscope/slurm}
job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as a Slurm epilog}

[ -d "$map_dir" ] || exit 0
for file in "$map_dir"/*; do
    [ -f "$file" ] || continue
    read -r owner _ < "$file" || continue
    if [ "$owner" = "$job" ]; then
        rm -f "$file"
    fi
done
