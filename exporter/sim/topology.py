"""Cluster layout of the simulator: racks of nodes, GPUs and InfiniBand ports per node."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeSpec:
    cluster: str
    rack: str
    name: str
    index: int  # position in the cluster, 0-based
    gpus: int
    ib_ports: int


def build_topology(
    nodes: int, gpus_per_node: int = 8, racks: int = 1, ib_ports_per_node: int = 8, cluster: str = "sim"
) -> tuple[NodeSpec, ...]:
    """Nodes spread over racks in contiguous blocks, as a real floor is cabled."""
    if nodes < 1 or gpus_per_node < 1 or racks < 1 or ib_ports_per_node < 0:
        raise ValueError("nodes, gpus_per_node and racks must be >= 1, ib_ports_per_node >= 0")
    if racks > nodes:
        raise ValueError(f"racks ({racks}) cannot exceed nodes ({nodes})")
    per_rack = -(-nodes // racks)
    return tuple(
        NodeSpec(
            cluster=cluster,
            rack=f"rack-{i // per_rack:02d}",
            name=f"node-{i:03d}",
            index=i,
            gpus=gpus_per_node,
            ib_ports=ib_ports_per_node,
        )
        for i in range(nodes)
    )
