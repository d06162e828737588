"""Which job each GPU belongs to: Slurm (prolog mapping files, process cgroups) or the simulator."""
