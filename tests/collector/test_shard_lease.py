"""Shard leases on a real PostgreSQL: k members each hold about 1/k of the shards, never one shard
twice; a member whose connection dies has its shards taken by the others at their next rebalance."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from gpuscope.core.shards import SHARDS, ShardLease, shard_of

KEY = 0x7465737473686172  # this test's task


def test_members_split_the_shards_and_take_over_a_dead_ones(dsn: str) -> None:
    asyncio.run(_split_and_take_over(dsn))


async def _split_and_take_over(dsn: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(3)]
    try:
        leases = [ShardLease(conn, KEY, "test") for conn in conns]
        for lease in leases:
            await lease.join()
        for _ in range(3):  # members rebalance in turn, as their loops do
            for lease in leases:
                await lease.rebalance()
        _disjoint(leases)
        sizes = sorted(len(lease.held) for lease in leases)
        assert sizes == [SHARDS // 3, SHARDS // 3, SHARDS - 2 * (SHARDS // 3)], sizes  # 5, 5, 6
        assert {lease.members for lease in leases} == {3}

        await conns[0].close()  # a collector gone: its session's locks with it
        survivors = leases[1:]
        for _ in range(2):
            for lease in survivors:
                await lease.rebalance()
        _disjoint(survivors)
        assert sorted(len(lease.held) for lease in survivors) == [SHARDS // 2, SHARDS // 2]

        late = ShardLease(await psycopg.AsyncConnection.connect(dsn, autocommit=True), KEY, "test")
        conns.append(late.conn)
        await late.join()
        for _ in range(3):
            for lease in (*survivors, late):
                await lease.rebalance()
        _disjoint([*survivors, late])
        assert sorted(len(lease.held) for lease in (*survivors, late)) == [5, 5, 6], (
            "a member that joins is given a share"
        )
    finally:
        for conn in conns:
            await conn.close()


def test_one_member_holds_every_shard(dsn: str) -> None:
    async def alone() -> frozenset[int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            lease = ShardLease(conn, KEY, "test")
            await lease.join()
            return await lease.rebalance()

    assert asyncio.run(alone()) == frozenset(range(SHARDS))


@pytest.mark.parametrize("seed", ["1", "2"])
def test_a_key_has_one_shard_in_every_process(seed: str) -> None:
    """Collectors must agree on a key's shard: not Python's hash(), salted per process."""
    keys = ["job-1", "12345", "cluster/node-007", ""]
    code = f"from gpuscope.core.shards import shard_of; print([shard_of(k) for k in {keys!r}])"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    there = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert there.stdout.strip() == str([shard_of(key) for key in keys])
    assert all(0 <= shard_of(key) < SHARDS for key in keys)


def _disjoint(leases: list[Any]) -> None:
    seen: set[int] = set()
    for lease in leases:
        assert not (seen & lease.held), "a shard held twice"
        seen |= lease.held
