"""Tests against a real Slurm (slurmctld and slurmd on loopback): tests/slurm/cluster.py starts one."""
