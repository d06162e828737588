"""Spool.replace, how the pusher's open batch grows on disk: whole versions only, exact byte accounting."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gpuscope.exporter import spool as spool_module
from gpuscope.exporter.spool import Spool


def test_a_rewrite_counts_the_new_size_and_the_cap_drops_older_batches_not_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=300)
    older = spool.put(b"a" * 100)
    growing = spool.put(b"b" * 50)
    spool.replace(growing, b"b" * 150)
    assert spool.size_bytes == 250 and growing.read_bytes() == b"b" * 150
    spool.replace(growing, b"b" * 250)
    assert spool.size_bytes == 250 and spool.dropped_batches == 1, "the oldest went; the one growing stayed"
    assert not older.exists() and spool.oldest() == (growing, b"b" * 250)
    assert Spool(tmp_path).size_bytes == 250, "the same count as a restart's"


def test_a_rewrite_cut_off_leaves_the_previous_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = Spool(tmp_path)
    path = spool.put(b"version 1")

    def disk_error(*_: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(spool_module.os, "replace", disk_error)
    with pytest.raises(OSError):
        spool.replace(path, b"version 2, longer")
    assert path.read_bytes() == b"version 1" and spool.size_bytes == len(b"version 1")
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "no half left behind"


def test_a_crash_between_write_and_rename_keeps_the_previous_version(tmp_path: Path) -> None:
    path = Spool(tmp_path).put(b"version 1")
    path.with_suffix(".tmp").write_bytes(b"version 2, cut o")  # what a SIGKILL mid-rewrite leaves
    spool = Spool(tmp_path)
    assert spool.oldest() == (path, b"version 1") and not list(tmp_path.glob("*.tmp"))


def test_a_batch_no_longer_spooled_is_not_rewritten(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    path = spool.put(b"sent")
    spool.remove(path)
    with pytest.raises(KeyError):
        spool.replace(path, b"sent, then grown")
    assert not path.exists() and spool.size_bytes == 0 and len(spool) == 0
    assert os.listdir(tmp_path) == []
