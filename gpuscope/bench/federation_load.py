"""The bench's telemetry split into clusters of whole nodes, each loaded into its own database by
peers_store.load (its GPUs by position), the single database getting all of them.

The same GPUs by position, so that the single database and the cluster databases hold the same
samples: Telemetry.block() depends on the fleet, not on who asks. GPUs are inserted in position order,
so their ids (1, 2, ... in one database; k * ID_BLOCK + 1, ... in cluster k) sort the same way in both.
"""

from __future__ import annotations

from dataclasses import replace

from gpuscope.bench.telemetry import Telemetry


def split_into_clusters(telemetry: Telemetry, clusters: int) -> tuple[Telemetry, list[range]]:
    """The telemetry with its GPUs relabelled into `clusters` clusters of consecutive nodes, and each
    cluster's GPU positions."""
    per_cluster = len(telemetry.gpus) // clusters
    if per_cluster * clusters != len(telemetry.gpus) or per_cluster % 8:
        raise ValueError(f"{len(telemetry.gpus)} GPUs do not split into {clusters} clusters of whole nodes")
    gpus = tuple(replace(g, cluster=cluster_name(p // per_cluster)) for p, g in enumerate(telemetry.gpus))
    return replace(telemetry, gpus=gpus), [range(k * per_cluster, (k + 1) * per_cluster) for k in range(clusters)]


def cluster_name(index: int) -> str:
    return f"cluster-{index}"
