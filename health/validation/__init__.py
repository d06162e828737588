"""The checks a drained node passes before it returns to service: the site's own command, or a preset
that runs `dcgmi diag` or NCCL's `all_reduce_perf` and reads their output into a verdict naming what failed."""
