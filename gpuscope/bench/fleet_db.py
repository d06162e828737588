"""A fleet of nodes, GPUs and InfiniBand ports in a bench's database, named as a site would name them."""

from __future__ import annotations

from typing import Any

import psycopg


def create_fleet(conn: psycopg.Connection[Any], nodes: int, gpus_per_node: int, ports_per_node: int) -> None:
    """Nodes node-0000.. in racks of 16, their GPUs (ids in node then index order) and ports mlx5_0.."""
    conn.execute(
        "INSERT INTO node (cluster, name, rack) SELECT 'bench', 'node-' || lpad(n::text, %s, '0'),"
        " 'rack-' || lpad((n / 16)::text, %s, '0') FROM generate_series(0, %s) n",
        # at least 4 and 3 digits, as before; more where the fleet needs them (lpad cuts longer numbers)
        (max(4, len(str(nodes - 1))), max(3, len(str((nodes - 1) // 16))), nodes - 1),
    )
    conn.execute(
        "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) SELECT node_id, g,"
        " 'GPU-' || node_id || '-' || g, 'H100', '-' FROM node, generate_series(0, %s) g ORDER BY node_id, g",
        (gpus_per_node - 1,),
    )
    conn.execute(
        "INSERT INTO ib_port (node_id, device, port) SELECT node_id, 'mlx5_' || p, 1"
        " FROM node, generate_series(0, %s) p ORDER BY node_id, p",
        (ports_per_node - 1,),
    )
