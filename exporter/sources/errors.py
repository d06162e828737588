"""Logs each distinct hardware-read problem once, not once per sampling cycle."""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable


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
