"""What `dcgmi diag` printed, read into one result per test and GPU: its JSON (`-j`, preferred) or, when
the output is not JSON, its table.

The JSON (DCGM 2.x-3.x, dcgmi/Diag.cpp): {"DCGM GPU Diagnostic": {"test_categories": [{"category":
"Hardware", "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": "3", "status": "Fail", "warnings":
...}]}]}], "runtime_error": "..." when it could not run}. Over the versions "gpu_ids" became "gpu_id",
warnings a text or a list of texts or of {"warning": ...}, statuses Pass or PASS; all are read.

The table: sections (`+-----  Hardware  ---...+`), one row per test (`| GPU Memory | Pass - All |`, or a
row per status: `| GPU Memory | Pass - GPUs: 0, 1 |`, `|  | Fail - GPU: 3 |`), then `| Warning | GPU 3
...` rows whose text DCGM cut into 45-character pieces over the following rows."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

INFO_WIDTH = 45  # characters of text per table row (dcgmi's DATA_INFO_TAG_LEN)
_SECTION = re.compile(r"^[|+]-----\s+(?P<name>\S.*?)\s+-+\+")
_STATUS = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)\w*(?: - (?:All|GPUs?: (?P<gpus>[\d,\s]+)))?$")
_NOTES = ("Warning", "Error", "Info")


@dataclass(frozen=True)
class TestResult:
    test: str  # as DCGM names it: "GPU Memory", "PCIe", "Denylist"
    status: str  # lower case: pass, fail, warn, skip(ped)
    gpus: tuple[str, ...]  # the GPU ids the result is for; empty when it does not say (a node-wide check)
    warnings: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status.startswith("fail")


@dataclass(frozen=True)
class DiagReport:
    results: tuple[TestResult, ...]
    error: str = ""  # dcgmi's own error: the diagnostic did not run (or not to its end)


def read_diag_output(text: str) -> DiagReport | None:
    """The report in dcgmi's output, JSON or table; None when it holds neither."""
    return report_from_json(text) or report_from_table(text)


def report_from_json(text: str) -> DiagReport | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:  # what precedes the document (a launcher's lines, a warning) is not part of it
        document = json.loads(text[start : end + 1])
    except ValueError:
        return None
    root = document.get("DCGM GPU Diagnostic") if isinstance(document, dict) else None
    if not isinstance(root, dict):
        return None
    results = [
        TestResult(str(test.get("name", "?")), str(result.get("status", "")).lower(), _ids(result), _notes(result))
        for category in _dicts(root.get("test_categories"))
        for test in _dicts(category.get("tests"))  # DCGM has printed nulls in this list
        for result in _dicts(test.get("results"))
    ]
    return DiagReport(tuple(results), str(root.get("runtime_error") or ""))


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _ids(result: dict[str, Any]) -> tuple[str, ...]:
    value = result.get("gpu_id", result.get("gpu_ids"))
    if value is None:
        return ()
    return tuple(part.strip() for part in str(value).split(",") if part.strip())


def _notes(result: dict[str, Any]) -> tuple[str, ...]:
    notes = result.get("warnings") or result.get("info")
    if isinstance(notes, str):
        return (notes,)
    if not isinstance(notes, list):
        return ()
    texts = [note.get("warning") or note.get("message") if isinstance(note, dict) else note for note in notes]
    return tuple(str(text) for text in texts if text)


@dataclass
class _Row:
    """A test of the table while it is read: its status lines and its notes."""

    test: str
    statuses: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    notes: list[list[str]] = field(default_factory=list)  # each note's pieces, one per table row


def report_from_table(text: str) -> DiagReport | None:
    rows: list[_Row] = []
    section, note, errors = "", None, []
    for line in text.splitlines():
        if heading := _SECTION.match(line):
            section, note = heading["name"], None
            continue
        if line.startswith("Error"):  # dcgmi could not run the diagnostic: a line, no table
            errors.append(line.strip())
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 4 or section in ("", "Metadata"):
            continue
        name, info = cells[1].strip(), cells[2]
        status = _STATUS.match(info.strip())
        if name in _NOTES and rows:
            note = [info[1 : 1 + INFO_WIDTH]]
            if name != "Info":
                rows[-1].notes.append(note)
        elif not name and note is not None and not status:
            note.append(info[1 : 1 + INFO_WIDTH])
        elif status:
            if name:
                rows.append(_Row(name))
            elif not rows:
                continue
            note = None
            gpus = tuple(g.strip() for g in (status["gpus"] or "").split(",") if g.strip())
            rows[-1].statuses.append((status["status"].lower(), gpus))
    if not rows and not errors:
        return None
    results = [
        TestResult(row.test, status, gpus, tuple(" ".join("".join(n).split()) for n in row.notes))
        for row in rows
        for status, gpus in row.statuses
    ]
    return DiagReport(tuple(results), "; ".join(errors) if not rows else "")
