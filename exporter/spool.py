"""An on-disk queue of encoded batches, for when the collector is unreachable.

Each batch is one file, written to a temporary name, fsynced and renamed, so a crash leaves either
the whole batch or nothing. Names sort in the order batches were spooled, and batches keep their
(exporter_id, seq), so replaying after a restart is safe: the collector stores a batch once.
When the spool would exceed its size cap, the oldest batches are dropped, counted and logged.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".batch"


class Spool:
    def __init__(self, directory: Path, max_bytes: int = 1 << 30) -> None:
        if max_bytes <= 0:
            raise ValueError("the spool size cap must be positive")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.max_bytes = max_bytes
        self.dropped_batches = 0
        self._counter = itertools.count()
        self._lock = threading.Lock()
        for leftover in directory.glob("*.tmp"):  # a write cut off by a crash: never acknowledged
            leftover.unlink(missing_ok=True)
        self._files = sorted(directory.glob("*" + SUFFIX))
        self._bytes = sum(path.stat().st_size for path in self._files)
        if self._files:
            log.info("spool %s holds %d batches from before; they are sent first", directory, len(self._files))

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def put(self, body: bytes) -> None:
        name = f"{time.time_ns():020d}-{next(self._counter):06d}{SUFFIX}"
        path = self.directory / name
        temporary = path.with_suffix(".tmp")
        with open(temporary, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        with self._lock:
            self._files.append(path)
            self._bytes += len(body)
            while self._bytes > self.max_bytes and len(self._files) > 1:
                oldest = self._files.pop(0)
                self._bytes -= oldest.stat().st_size
                oldest.unlink(missing_ok=True)
                self.dropped_batches += 1
                log.error("spool over %d bytes: dropped the oldest batch %s", self.max_bytes, oldest.name)

    def oldest(self) -> tuple[Path, bytes] | None:
        with self._lock:
            while self._files:
                path = self._files[0]
                try:
                    return path, path.read_bytes()
                except FileNotFoundError:  # removed from outside; skip it
                    self._files.pop(0)
            return None

    def remove(self, path: Path) -> None:
        with self._lock:
            if path in self._files:
                self._files.remove(path)
                self._bytes -= path.stat().st_size
            path.unlink(missing_ok=True)
