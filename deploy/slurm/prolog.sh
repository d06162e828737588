#!/bin/sh
# gpuscope Slurm prolog: record which job holds each of this job's GPUs, for the exporter.
#
# Writes one file per GPU into $GPUSCOPE_SLURM_MAP_DIR (default /run/gpuscope/slurm), named by the
# GPU's UUID, holding "JOBID USER". UUIDs, not indices: Slurm's GPU numbers (SLURM_JOB_GPUS) follow
# device minor numbers (/dev/nvidiaN), which need not match NVML's enumeration order.
# Install: Prolog=/etc/slurm/gpuscope-prolog.sh in slurm.conf (runs as root on each node).
set -eu

map_dir=${GPUSCOPE_SLURM_MAP_DIR:-/run/gpuscope/slurm}
job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as a Slurm prolog}
user=${SLURM_JOB_USER:-unknown}
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}

[ -n "$gpus" ] || exit 0  # a job without GPUs on this node
mkdir -p "$map_dir"
chmod 755 "$map_dir"

# minor number -> UUID, from the driver; empty when nvidia-smi is missing (then files are named by number).
uuids=$(nvidia-smi --query-gpu=minor_number,uuid --format=csv,noheader,nounits 2>/dev/null || true)

for minor in $(printf '%s' "$gpus" | tr ',' ' '); do
    uuid=$(printf '%s\n' "$uuids" | awk -F', *' -v m="$minor" '$1 == m { print $2 }')
    name=${uuid:-$minor}
    tmp="$map_dir/.$name.$$"
    printf '%s %s\n' "$job" "$user" > "$tmp"
    mv -f "$tmp" "$map_dir/$name"  # atomic: the exporter never reads half a file
done
