"""Group commit: requests that arrive together are stored in one transaction.

Each request hands its validated batch to the writer and waits; a few writer tasks each take every
batch waiting at that moment (up to MAX_GROUP) and store them with store_batches. A request is
answered only after the transaction holding its batch has committed, so a 2xx still means durable.
If a group fails for a reason other than the database being away, its batches are stored one by one,
so one bad batch cannot fail the others.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from psycopg_pool import AsyncConnectionPool

from gpuscope.collector.store.batch import Batch
from gpuscope.collector.store.writer import InventoryCache, StoreResult, store_batch, store_batches

log = logging.getLogger(__name__)

MAX_GROUP = 256


class GroupWriter:
    def __init__(self, pool: AsyncConnectionPool, cache: InventoryCache, writers: int) -> None:
        self._pool = pool
        self._cache = cache
        self._queue: asyncio.Queue[tuple[Batch, asyncio.Future[StoreResult]]] = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._run(), name=f"group-writer-{n}") for n in range(writers)]

    async def store(self, batch: Batch) -> StoreResult:
        future: asyncio.Future[StoreResult] = asyncio.get_running_loop().create_future()
        await self._queue.put((batch, future))
        return await future

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
        try:
            results = await store_batches(self._pool, [batch for batch, _ in group], self._cache)
        except psycopg.Error as exc:
            if len(group) == 1 or isinstance(exc, psycopg.OperationalError):
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
        for (_, future), result in zip(group, results, strict=True):
            _settle(future, result)


def _settle(future: asyncio.Future[StoreResult], outcome: StoreResult | BaseException) -> None:
    if future.done():  # the request went away (client disconnected); nothing to tell
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
