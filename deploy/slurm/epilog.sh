#!/bin/sh
# gpuscope Slurm epilog: forget this job's GPUs. Removes only files that still name this job, so a
# late epilog cannot erase the next job's record. Install and settings: README.md beside this file.
#
# Like the prolog: no PATH and no variables but Slurm's, so settings come from gpuscope.conf; and an
# epilog that exits non-zero drains the node, so this one always exits 0.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
set -u

job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as a Slurm epilog}

# The prolog's lookup: gpuscope.conf beside slurm.conf, else /etc/slurm/gpuscope.conf.
config=${SLURM_CONF:-/etc/slurm/slurm.conf}
config=${config%/*}/gpuscope.conf
[ -f "$config" ] || config=/etc/slurm/gpuscope.conf
map_dir=$(sed -n 's/^[[:space:]]*map_dir[[:space:]]*=[[:space:]]*\(.*[^[:space:]]\)[[:space:]]*$/\1/p' "$config" \
    2>/dev/null | tail -n 1)
map_dir=${map_dir:-/run/gpuscope/slurm}

[ -d "$map_dir" ] || exit 0
for file in "$map_dir"/*; do
    [ -f "$file" ] || continue
    owner=
    read -r owner _ < "$file" 2>/dev/null
    if [ "$owner" = "$job" ]; then
        rm -f "$file"
    fi
done
exit 0
