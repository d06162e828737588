"""Imports amdsmi, and says in one line what to do when the installed wrapper does not fit the node.

The amdsmi Python package is a ctypes wrapper over ROCm's libamd_smi.so, and binds every library
function when imported: a wrapper newer than the node's ROCm fails there (AttributeError: undefined
symbol), and one that imports may still fail at amdsmi_init. Any such failure is BackendUnavailable, so
--backend auto falls back. The fix is the wrapper that ships with the node's ROCm (docs/amd.md).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from gpuscope.exporter.sources.base import BackendUnavailable


def load_amdsmi(importer: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType:
    try:
        return importer("amdsmi")
    except ModuleNotFoundError as exc:
        if exc.name == "amdsmi":
            raise BackendUnavailable(
                f"the amdsmi package is not installed: install the one that ships with ROCm "
                f"(pip install {_rocm_root()}/share/amd_smi), see docs/amd.md"
            ) from None
        raise BackendUnavailable(mismatch(exc)) from None
    except (KeyError, OSError) as exc:
        # Seen with amdsmi 7.0.2 and no ROCm: the import itself raises KeyError('libamd_smi.so').
        raise BackendUnavailable(f"amdsmi cannot load ROCm's libamd_smi ({exc!r}); is ROCm installed?") from None
    except Exception as exc:
        # A wrapper newer than the library binds functions the library lacks when imported: AttributeError.
        raise BackendUnavailable(mismatch(exc)) from None


def mismatch(exc: BaseException) -> str:
    rocm = _rocm_root()
    return (
        f"the amdsmi Python package {_package_version()} does not match this node's ROCm library "
        f"(ROCm {_rocm_version(rocm)}; {type(exc).__name__}: {one_line(exc)}): install the amdsmi that ships "
        f"with ROCm (pip install {rocm}/share/amd_smi), see docs/amd.md"
    )


def _rocm_root() -> Path:
    return Path(os.environ.get("ROCM_PATH", "/opt/rocm"))


def _package_version() -> str:
    try:
        return importlib.metadata.version("amdsmi")
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def _rocm_version(root: Path) -> str:
    try:
        return (root / ".info" / "version").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
