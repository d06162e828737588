"""Logs each distinct hardware-read problem once, not once per sampling cycle."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable


class LogOnce:
    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._seen: set[Hashable] = set()
        self._lock = threading.Lock()

    def __call__(self, key: Hashable, level: int, message: str, *args: object) -> None:
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
        self._logger.log(level, message, *args)


class GroupGuard:
    """Runs one device's groups of library calls: a group the device does not support (or will not answer
    this process) is remembered and skipped until forget() (its metrics are absent, never 0); any other
    library error is logged once.
    Shared by the NVML and AMD backends, which differ only in how their library says 'not supported'."""

    def __init__(
        self,
        label: str,
        log_once: LogOnce,
        errors: type[Exception],
        is_unsupported: Callable[[Exception], bool],
        passthrough: tuple[type[Exception], ...] = (),
    ) -> None:
        self.label = label  # e.g. "GPU 3 (NVIDIA H100 80GB HBM3)"
        self.unsupported: set[str] = set()
        self._log_once = log_once
        self._errors = errors
        self._is_unsupported = is_unsupported
        self._passthrough = passthrough

    def forget(self) -> None:
        """Ask every group again: the device changed what it supports (e.g. it left MIG mode)."""
        self.unsupported.clear()

    def run(self, group: str, read: Callable[..., object], *args: object) -> None:
        if group in self.unsupported:
            return
        try:
            read(*args)
        except self._passthrough:
            raise
        except self._errors as exc:
            if self._is_unsupported(exc):
                self.unsupported.add(group)
                self._log_once(
                    (self.label, group, "unsupported", str(exc)),
                    logging.INFO,
                    "%s: %s not available (%s); those metrics are left out",
                    self.label,
                    group,
                    exc,
                )
            else:
                self._log_once(
                    (self.label, group, str(exc)), logging.WARNING, "%s: reading %s failed: %s", self.label, group, exc
                )
