"""An on-disk queue of encoded batches, for when the collector is unreachable.

Each batch is one file, written to a temporary name, fsynced and renamed (and the directory fsynced),
so a crash leaves either the whole batch or nothing; a batch written again in place (the pusher's open
batch, growing during an outage) leaves its old version or its new one. Names sort in the order batches
were spooled, and batches keep their (exporter_id, seq), so replaying after a restart is safe: the
collector stores a batch once. When the spool would exceed its size cap, the oldest batches are dropped,
counted and logged; the cap counts each batch at its current size.
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
        self._sizes = {path: path.stat().st_size for path in sorted(directory.glob("*" + SUFFIX))}
        self._files = list(self._sizes)
        self._bytes = sum(self._sizes.values())
        # Names must keep sorting in spooling order even if the wall clock steps back, here or across a restart.
        self._last_stamp = max((_stamp(path) for path in self._files), default=0)
        if self._files:
            log.info("spool %s holds %d batches from before; they are sent first", directory, len(self._files))

    def __len__(self) -> int:
        with self._lock:
            return len(self._files)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def put(self, body: bytes) -> Path:
        """Store a batch durably and return its file; an OSError means it is not in the spool at all."""
        with self._lock:
            self._last_stamp = max(time.time_ns(), self._last_stamp + 1)
            path = self.directory / f"{self._last_stamp:020d}-{next(self._counter):06d}{SUFFIX}"
        self._write(path, body)
        with self._lock:
            self._files.append(path)
            self._sizes[path] = len(body)
            self._bytes += len(body)
            self._trim(keep=path)
        return path

    def replace(self, path: Path, body: bytes) -> None:
        """Store a new version of a spooled batch, in its place in the order: a crash leaves the old version
        or the new one, and an OSError leaves the old one (KeyError: `path` is no longer in the spool)."""
        with self._lock:
            if path not in self._sizes:
                raise KeyError(path)
        self._write(path, body)
        with self._lock:
            if path not in self._sizes:  # removed while being rewritten: it stays removed
                self._unlink(path)
                return
            self._bytes += len(body) - self._sizes[path]
            self._sizes[path] = len(body)
            self._trim(keep=path)

    def oldest(self) -> tuple[Path, bytes] | None:
        with self._lock:
            while self._files:
                path = self._files[0]
                try:
                    return path, path.read_bytes()
                except FileNotFoundError:  # removed from outside; skip it
                    self._files.pop(0)
                    self._bytes -= self._sizes.pop(path)
            return None

    def remove(self, path: Path) -> None:
        with self._lock:
            if path in self._sizes:
                self._files.remove(path)
                self._bytes -= self._sizes.pop(path)
            self._unlink(path)

    def _write(self, path: Path, body: bytes) -> None:
        """Put `body` at `path` whole or not at all: written aside, fsynced, renamed over `path`."""
        temporary = path.with_suffix(".tmp")
        try:
            with open(temporary, "wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except OSError:
            temporary.unlink(missing_ok=True)  # a disk that is full must not fill up with halves
            raise
        self._sync_directory()

    def _trim(self, keep: Path) -> None:
        """Drop the oldest batches, other than `keep` (just written), while over the size cap (lock held)."""
        while self._bytes > self.max_bytes and len(self._files) > 1:
            oldest = next(path for path in self._files if path != keep)
            self._files.remove(oldest)
            self._bytes -= self._sizes.pop(oldest)
            self._unlink(oldest)
            self.dropped_batches += 1
            log.error("spool over %d bytes: dropped the oldest batch %s", self.max_bytes, oldest.name)

    def _sync_directory(self) -> None:
        """Make the rename itself durable, so a power cut does not leave the batch under its temporary name
        (which the next start deletes). The file is in place already, so a failure here is not the caller's."""
        try:
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.debug("could not fsync the spool directory %s: %s", self.directory, exc)

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:  # left on disk: the next start sends it again, which the collector de-duplicates
            log.warning("could not remove the spooled batch %s: %s", path, exc)


def _stamp(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[0])
    except ValueError:
        return 0
