"""Leader work split across collectors: a task's work is cut into SHARDS shards (by job, rule or node),
and each shard is led by whichever collector holds its PostgreSQL advisory lock, as one collector leads
an unsharded task (core/leader.py). The locks are session locks on the lease's own connection, so a
collector that dies frees its shards with its connection, and the others take them at their next
rebalance.

Balance without a coordinator: every collector running the task holds a shared lock on the task's
membership key, so each can list the members in pg_locks, in the same order (by backend pid). Each one's
share is SHARDS // members, one more for the first SHARDS % members of them: the shares add up to SHARDS.
Each gives back what it holds beyond its share and takes free shards up to it. k collectors thus carry
1/k of the work each (16 over 3: 6, 5, 5); a member that joins is given shards as the others shed them,
one that leaves has its shards taken within one rebalance interval.

Shard of a key: CRC-32 of its text, modulo SHARDS: the same in every process and every Python (unlike
hash()), so all collectors agree on who owns what.
"""

from __future__ import annotations

import logging
import random
import zlib
from typing import Any

from psycopg import AsyncConnection

log = logging.getLogger(__name__)

SHARDS = 16  # enough to spread over a handful of collectors evenly; each is one advisory lock


def shard_of(key: str, shards: int = SHARDS) -> int:
    return zlib.crc32(key.encode()) % shards


class ShardLease:
    """The shards of one task this collector holds, on `conn` (autocommit, the lease's alone: a session
    advisory lock lives as long as the session). `base_key`: the task's lock key; shard i is base_key + 1 + i,
    the membership key base_key itself (held shared by every member)."""

    def __init__(self, conn: AsyncConnection[Any], base_key: int, what: str, shards: int = SHARDS) -> None:
        self.conn = conn
        self.base_key = base_key
        self.what = what
        self.shards = shards
        self.held: frozenset[int] = frozenset()
        self.members = 0

    def owns(self, key: str) -> bool:
        return shard_of(key, self.shards) in self.held

    async def join(self) -> None:
        await self.conn.execute("SELECT pg_advisory_lock_shared(%s)", (self.base_key,))

    async def rebalance(self) -> frozenset[int]:
        """Give back shards beyond this member's share and take free ones up to it; the shards held now.
        Call it between two rounds of the task's work, never during one: a shard given back mid-round
        would be worked by two collectors at once."""
        members = await self._members()
        self.members = max(1, len(members))
        pid = self.conn.info.backend_pid
        rank = members.index(pid) if pid in members else 0
        share = self.shards // self.members + (1 if rank < self.shards % self.members else 0)
        held = set(self.held)
        for shard in sorted(held)[share:]:  # the excess, highest first given back
            await self.conn.execute("SELECT pg_advisory_unlock(%s)", (self._key(shard),))
            held.discard(shard)
        free = [shard for shard in range(self.shards) if shard not in held]
        random.shuffle(free)  # members taking at once mostly try different shards
        for shard in free:
            if len(held) >= share:
                break
            cur = await self.conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key(shard),))
            row = await cur.fetchone()
            if row and row[0]:
                held.add(shard)
        if frozenset(held) != self.held:
            log.info(
                "%s: this collector leads %d of %d shards (%d collectors)",
                self.what,
                len(held),
                self.shards,
                self.members,
            )
        self.held = frozenset(held)
        return self.held

    async def _members(self) -> list[int]:
        """The backend pids of the task's members, in order."""
        cur = await self.conn.execute(
            "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND ((classid::bigint << 32) | objid::bigint) = %s ORDER BY pid",
            (self.base_key,),
        )
        return [int(row[0]) for row in await cur.fetchall()]

    def _key(self, shard: int) -> int:
        return self.base_key + 1 + shard
