"""What each XID code means, in NVIDIA's words (docs.nvidia.com/deploy/xid-errors), kept as data in
xid_messages.csv: dcgm-exporter labels its XID field with it (err_msg), and so do we under its names; the
health rules and the node page say the same words. Here, below both, so neither imports the other."""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources

UNKNOWN_MESSAGE = "Unknown Error"  # dcgm-exporter's text for a code outside NVIDIA's table


@cache
def xid_messages() -> dict[int, str]:
    text = resources.files("gpuscope.core").joinpath("xid_messages.csv").read_text(encoding="utf-8")
    return {int(row["xid"]): row["message"] for row in csv.DictReader(text.splitlines())}


def xid_message(code: int) -> str:
    return xid_messages().get(code, UNKNOWN_MESSAGE)
