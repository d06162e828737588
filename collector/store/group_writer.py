"""Group commit: requests that arrive together are stored in one transaction.

Each request hands its validated batch to the writer and waits; a few writer tasks each take every
batch waiting at that moment (up to MAX_GROUP) and store them with store_batches. A request is
answered only after the transaction holding its batch has committed, so a 2xx still means durable.
If a group fails for a reason other than the database being away, its batches are stored one by one,
so one bad batch cannot fail the others. A group that lost a deadlock or a serialization conflict is
tried once more as it was (store_batches takes its locks in one global order, so this should not happen).

While the database is known to be away (store/availability.py), queued batches fail at once instead of
each waiting for a connection; every outcome tells that state what the database did.
"""

from __future__ import annotations

import asyncio
import collections
import logging

import psycopg
import psycopg.errors
from psycopg_pool import AsyncConnectionPool

from gpuscope.collector.store.availability import DatabaseStatus
from gpuscope.collector.store.batch import Batch
from gpuscope.collector.store.writer import InventoryCache, StoreResult, store_batch, store_batches

log = logging.getLogger(__name__)

MAX_GROUP = 256
# Lost a lock conflict: nothing was stored and nothing is wrong with the data, so the same group again.
CONFLICTS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


class DatabaseAway(psycopg.OperationalError):
    """Not tried: the database was known to be away when the batch's turn came."""


class WriteDeadline(TimeoutError):
    """Not stored in time (a hung database); the store may still commit it."""


WRITE_DEADLINE_S = 8.0  # before an exporter's own 10 s timeout, so that it hears why
DEADLINE_SWEEP_S = 0.25


class GroupWriter:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        cache: InventoryCache,
        writers: int,
        status: DatabaseStatus | None = None,
        deadline_s: float = WRITE_DEADLINE_S,
    ) -> None:
        self._pool = pool
        self._cache = cache
        self._status = status or DatabaseStatus()
        self._deadline_s = deadline_s
        self._deadlines: collections.deque[tuple[float, asyncio.Future[StoreResult]]] = collections.deque()
        self._queue: asyncio.Queue[tuple[Batch, asyncio.Future[StoreResult]]] = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._run(), name=f"group-writer-{n}") for n in range(writers)]
        self._tasks.append(asyncio.create_task(self._expire(), name="group-writer-deadlines"))

    async def store(self, batch: Batch) -> StoreResult:
        return await self.submit(batch)

    def submit(self, batch: Batch) -> asyncio.Future[StoreResult]:
        """Queue the batch; the future settles when its group's transaction has ended, or with
        WriteDeadline after deadline_s (the store goes on: it may still commit, and a retry of the batch
        is then recognised as a duplicate)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[StoreResult] = loop.create_future()
        future.add_done_callback(_consume_outcome)
        self._queue.put_nowait((batch, future))  # unbounded: the ingest route's write slots bound it
        self._deadlines.append((loop.time() + self._deadline_s, future))
        return future

    async def _expire(self) -> None:
        """One sweeper for every waiting batch's deadline (a timer per request cost more than all of
        this writer's other bookkeeping). Deadlines are appended in order, so the expired are in front."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(DEADLINE_SWEEP_S)
            now = loop.time()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, future = self._deadlines.popleft()
                if not future.done():  # a commit still waiting: /healthz says so until one succeeds
                    late = WriteDeadline(f"the batch was not stored within {self._deadline_s:g} s")
                    self._status.stalled(str(late))
                    _settle(future, late)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            group = [await self._queue.get()]
            while len(group) < MAX_GROUP and not self._queue.empty():
                group.append(self._queue.get_nowait())
            await self._store(group)

    async def _store(self, group: list[tuple[Batch, asyncio.Future[StoreResult]]]) -> None:
        if (away := self._status.refuses_writes()) is not None:
            for _, future in group:
                _settle(future, DatabaseAway(away.reason))
            return
        try:
            results = await self._store_group([batch for batch, _ in group])
        except psycopg.Error as exc:
            availability = self._status.failed(exc)
            if len(group) == 1 or isinstance(exc, psycopg.OperationalError) or not availability.ok:
                for _, future in group:
                    _settle(future, exc)
                return
            log.warning("a group of %d batches failed (%s); storing them one by one", len(group), exc)
            for batch, future in group:
                try:
                    _settle(future, await store_batch(self._pool, batch, self._cache))
                except psycopg.Error as single:
                    _settle(future, single)
            return
        except Exception as exc:  # a bug must fail these requests, not leave them waiting forever
            log.exception("storing a group of batches failed")
            for _, future in group:
                _settle(future, exc)
            return
        self._status.wrote()
        for (_, future), result in zip(group, results, strict=True):
            _settle(future, result)

    async def _store_group(self, batches: list[Batch]) -> list[StoreResult]:
        try:
            return await store_batches(self._pool, batches, self._cache)
        except CONFLICTS as exc:
            log.warning("a group of %d batches lost a lock conflict (%s); trying it again", len(batches), exc)
            return await store_batches(self._pool, batches, self._cache)


def _consume_outcome(future: asyncio.Future[StoreResult]) -> None:
    if not future.cancelled():
        future.exception()  # marks it retrieved: no "exception was never retrieved" for abandoned waits


def _settle(future: asyncio.Future[StoreResult], outcome: StoreResult | BaseException) -> None:
    if future.done():  # the request went away (client disconnected); nothing to tell
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
