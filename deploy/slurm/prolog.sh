#!/bin/sh
# gpuscope Slurm prolog: record which job holds each of this job's GPUs, for the exporter.
#
# Writes one file per GPU into map_dir (default /run/gpuscope/slurm), named by the GPU's UUID, holding
# "JOBID USER [account=ACCOUNT] [partition=PARTITION]". Install and settings: README.md beside this file.
#
# Slurm runs a prolog as root with its own SLURM_* variables only (no PATH, nothing exported to slurmd),
# so the settings come from a file, gpuscope.conf, and PATH is set here. A prolog that exits non-zero
# drains the node: any problem is logged and the job starts without a record, never with a guessed one.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
set -u

job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as a Slurm prolog}

warn() {  # syslog; and stderr, which slurmd logs only at SlurmdDebug=debug2 ("prolog success rc:0 output:")
    logger -t gpuscope-prolog -p daemon.warning "job $job: $*" 2>/dev/null
    printf 'gpuscope-prolog: job %s: %s\n' "$job" "$*" >&2
}

# gpuscope.conf sits beside slurm.conf (SLURM_CONF, which Slurm does pass); configless nodes, whose
# SLURM_CONF is slurmd's cache, keep it in /etc/slurm. Read as key=value data, never run as code.
config=${SLURM_CONF:-/etc/slurm/slurm.conf}
config=${config%/*}/gpuscope.conf
[ -f "$config" ] || config=/etc/slurm/gpuscope.conf
setting() {
    sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\(.*[^[:space:]]\)[[:space:]]*\$/\1/p" "$config" \
        2>/dev/null | tail -n 1
}
map_dir=$(setting map_dir)
map_dir=${map_dir:-/run/gpuscope/slurm}
extra_path=$(setting path)  # where nvidia-smi or slurmd live outside the system's directories
[ -z "$extra_path" ] || PATH=$extra_path:$PATH

# This node's GPUs in Slurm's order, one device file per line ("?" where Slurm names none), from
# `slurmd -G`: slurmd's own reading of gres.conf (NodeName= lines, File= ranges such as
# /dev/nvidia[4-7], Include, AutoDetect), printed in the order that numbers SLURM_JOB_GPUS. Asking
# slurmd rather than parsing gres.conf here means the two cannot disagree. -L /dev/null: a one-off run
# must not write a daemon start's worth of lines into slurmd's log for every job.
slurm_gpu_files() {
    set -- -G -L /dev/null
    [ -z "${SLURMD_NODENAME:-}" ] || set -- "$@" -N "$SLURMD_NODENAME"
    [ -z "${SLURM_CONF:-}" ] || set -- "$@" -f "$SLURM_CONF"
    slurmd "$@" 2>&1 | awk '
        # "Gres Name=gpu Type=a100 Count=2 Index=0 ID=7696487 File=/dev/nvidia[0-1] (null)"
        function expand(expr, out,    n, i, c, depth, part) {  # a Slurm hostlist: a,b[0-3,5],c
            n = 0; depth = 0; part = ""
            for (i = 1; i <= length(expr); i++) {
                c = substr(expr, i, 1)
                if (c == "[") depth++
                if (c == "]") depth--
                if (c == "," && depth == 0) { n = expand_one(part, out, n); part = "" } else part = part c
            }
            return part == "" ? n : expand_one(part, out, n)
        }
        function expand_one(p, out, n,    lb, rb, ranges, nr, r, b, v, width) {
            lb = index(p, "["); rb = index(p, "]")
            if (!lb || rb < lb) { out[++n] = p; return n }
            nr = split(substr(p, lb + 1, rb - lb - 1), ranges, ",")
            for (r = 1; r <= nr; r++) {
                if (split(ranges[r], b, "-") == 1) b[2] = b[1]
                width = length(b[1])  # [08-10] keeps its zero, as in Slurm
                for (v = b[1] + 0; v <= b[2] + 0; v++)
                    out[++n] = substr(p, 1, lb - 1) sprintf("%0" width "d", v) substr(p, rb + 1)
            }
            return n
        }
        / Name=gpu / {
            count = 0; files = ""
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^Count=/) count = substr($i, 7) + 0
                if ($i ~ /^File=/) files = substr($i, 6)
            }
            n = files == "" ? 0 : expand(files, list)
            if (n == count) { for (k = 1; k <= n; k++) print list[k]; next }
            pick = "?"  # MultipleFiles= (one GPU, several files): its /dev/nvidiaN
            if (count == 1) for (k = n; k >= 1; k--) if (list[k] ~ /nvidia[0-9]+$/) pick = list[k]
            for (k = 1; k <= count; k++) print pick
        }'
}

# Slurm's GPU indices ("0,1" or "0-3") -> the GPUs' UUIDs, or a warning and status 1. The index is a
# position in slurm_gpu_files; the device file gives the minor number, the driver the UUID.
uuids_of() {
    files=$(slurm_gpu_files)
    [ -n "$files" ] || { warn "slurmd -G lists no GPU device files for ${SLURMD_NODENAME:-this node}"; return 1; }
    smi=$(nvidia-smi --query-gpu=minor_number,uuid --format=csv,noheader,nounits 2>/dev/null) ||
        { warn "nvidia-smi failed or is not on PATH ($PATH)"; return 1; }
    for range in $(printf '%s' "$1" | tr ',' ' '); do
        first=${range%-*} last=${range#*-}
        case $first,$last in ,* | *, | *[!0-9,]*) warn "cannot read SLURM_JOB_GPUS=$1"; return 1 ;; esac
        index=$first
        while [ "$index" -le "$last" ]; do
            file=$(printf '%s\n' "$files" | sed -n "$((index + 1))p")
            [ -c "$file" ] || { warn "GPU index $index: no device file in slurmd's list (got '$file')"; return 1; }
            minor=$(printf '%d' "0x$(stat -L -c %T "$file")")
            uuid=$(printf '%s\n' "$smi" | awk -F', *' -v m="$minor" '$1 == m { print $2 }')
            case $uuid in
            GPU-*) printf '%s\n' "$uuid" ;;
            *) warn "GPU index $index ($file, minor $minor): nvidia-smi names no UUID"; return 1 ;;
            esac
            index=$((index + 1))
        done
    done
}

gpus=${SLURM_JOB_GPUS:-}
[ -n "$gpus" ] || exit 0  # a job without GPUs on this node
case ${CUDA_VISIBLE_DEVICES:-} in
*GPU-* | *MIG-*) uuids=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' ' ') ;;  # named by Slurm (docs/mig.md)
*) uuids=$(uuids_of "$gpus") || exit 0 ;;
esac

# Slurm sets SLURM_JOB_ACCOUNT whenever the job has an account (without accounting, only when given
# with -A; `scontrol show job` then says Account=(null) too), so slurmctld has nothing more to tell,
# and Slurm asks prologs not to call its commands.
record="$job ${SLURM_JOB_USER:-unknown}"
[ -z "${SLURM_JOB_ACCOUNT:-}" ] || record="$record account=$SLURM_JOB_ACCOUNT"
[ -z "${SLURM_JOB_PARTITION:-}" ] || record="$record partition=$SLURM_JOB_PARTITION"

if ! { mkdir -p "$map_dir" && chmod 755 "$map_dir"; }; then
    warn "cannot create $map_dir"
    exit 0
fi
for uuid in $uuids; do
    case $uuid in */* | .*) warn "not a file name: $uuid"; continue ;; esac
    tmp="$map_dir/.$uuid.$$"
    # atomic: the exporter never reads half a file
    if ! { printf '%s\n' "$record" > "$tmp" && mv -f "$tmp" "$map_dir/$uuid"; }; then
        warn "cannot write $map_dir/$uuid"
        rm -f "$tmp"
    fi
done
exit 0
