"""Fleet health: evidence about GPUs and nodes, a state per node with its history, and the scheduler
actions (drain, resume) that follow from it, behind a site's policy."""
